export { CertificateAuthority, DEFAULT_ROOT_TTL_SECONDS } from './ca.js';
export { Certificate } from './certificate.js';
export { type Credential, generateCsr } from './credential.js';
export { MAX_ROOTS_FILE_BYTES, parseRootsPem, RootsFileWatcher } from './roots-file.js';
export {
  formatSpiffeId,
  MAX_SPIFFE_ID_BYTES,
  MAX_TRUST_DOMAIN_BYTES,
  parseSpiffeId,
  type SpiffeId,
  trustDomainReasons,
} from './spiffe-id.js';
export { type SvidInfo, svidLeafReasons, validateSvid } from './svid.js';
export { TrustBundle } from './trust-bundle.js';
