export {
  clientTlsOptions,
  peerIdentity,
  type ServerTlsOptions,
  serverTlsOptions,
  verifyPeerIdentity,
} from './mtls.js';
