export {
  bulkCoalescer,
  PUMP_COALESCE_MIN_BYTES,
  PUMP_QUEUE_BYTES,
  type PumpCounter,
  pumpBytes,
} from './byte-pump.js';
export { bytesToIp, canonicalIp, formatHostPort, ipFamily, ipToBytes } from './ip.js';
export { listenServer } from './listen-server.js';
export { CONNECT_TIMEOUT_MS, whenConnected } from './when-connected.js';
