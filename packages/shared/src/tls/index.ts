export {
  clientSecureContext,
  clientTlsOptions,
  peerIdentity,
  type ServerTlsOptions,
  serverTlsOptions,
  verifyPeerIdentity,
} from './mtls.js';
