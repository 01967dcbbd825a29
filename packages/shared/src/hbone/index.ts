export {
  type ConnectionGate,
  DEFAULT_MAX_PREAUTH,
  DEFAULT_MAX_PREAUTH_PER_SOURCE,
  PreauthLimiter,
  type PreauthTicket,
  type SharedCount,
} from './admission.js';
export {
  buildConnectHeaders,
  type ConnectAuthority,
  type ConnectRejection,
  type ConnectRequest,
  parseConnectAuthority,
  validateConnectHeaders,
} from './connect-request.js';
/** Frame encoders, for hostile peers in the harness (the soak's mesh peers). */
export * as h2wire from './h2/frame.js';
export { ErrorCode as H2ErrorCode } from './h2/frame.js';
export { H2Connection, type H2ConnectionOptions } from './h2/h2-connection.js';
export type { H2Headers, H2Stream } from './h2/h2-stream.js';
export { HpackEncoder } from './h2/hpack.js';
export { isPrematureReset, PrematureResets } from './h2/reset-counter.js';
export { type ConnectHboneOptions, connectHbone } from './hbone-client.js';
export { countError, type HandshakeFailure, HboneMetrics } from './hbone-metrics.js';
export { HboneServer, type HboneServerOptions } from './hbone-server.js';
export { HboneSession, type OpenTunnelRequest } from './hbone-session.js';
export type { KeepaliveTiming, StreamWindowMode } from './hbone-settings.js';
export * as hboneSettings from './hbone-settings.js';
export type { TunnelAccept, TunnelRequest } from './inbound-session.js';
export { StreamWindows, streamWindowFor } from './stream-windows.js';
export {
  isResettableStream,
  type ResettableStream,
  resetStream,
  type SpliceStats,
  spliceTunnel,
} from './tunnel-splice.js';
