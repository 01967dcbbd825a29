export {
  ACCEPT_PAUSE_MAX_MS,
  ACCEPT_PAUSE_MIN_MS,
  AcceptBackoff,
  type AcceptBackoffTiming,
  acceptPauses,
  isFdExhaustion,
  registerAcceptPauses,
} from './accept-backoff.js';
export {
  type AdminResponse,
  type AdminTarget,
  adminRequest,
  defaultAdminSocket,
  MIN_ADMIN_TOKEN_CHARS,
  readAdminToken,
} from './admin-client.js';
export { type BindTarget, bindError } from './bind-error.js';
export {
  bulkCoalescer,
  PUMP_COALESCE_MIN_BYTES,
  PUMP_QUEUE_BYTES,
  type PumpCounter,
  pumpBytes,
} from './byte-pump.js';
export {
  bytesToIp,
  type Cidr,
  canonicalIp,
  cidrContains,
  cidrText,
  formatHostPort,
  formatIp,
  formatIpBytes,
  ipFamily,
  ipToBytes,
  makeCidr,
  type ParsedIp,
  parseCidr,
  parseIp,
} from './ip.js';
export { type ListenInputs, listenServer } from './listen-server.js';
export { CONNECT_TIMEOUT_MS, whenConnected } from './when-connected.js';
