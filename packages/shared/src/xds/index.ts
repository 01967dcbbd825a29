export {
  ADS_METHOD,
  CA_METHOD,
  type CertificateRequest,
  type CertificateResponse,
  certificateRequestCodec,
  certificateResponseCodec,
  type DeltaRequest,
  type DeltaResource,
  type DeltaResponse,
  deltaRequestCodec,
  deltaResponseCodec,
  structString,
  toStruct,
  type WireNode,
  type WireStruct,
} from './ads-messages.js';
export {
  CaClient,
  type CaClientOptions,
  type CertificateSigner,
  DEFAULT_CA_TIMEOUT_MS,
  MAX_CHAIN_LENGTH,
} from './ca-client.js';
export {
  type DecodedAddress,
  decodeAddress,
  decodeAuthorization,
  encodeAddress,
  encodeAuthorization,
  encodeMessage,
} from './codec.js';
export {
  type Accepted,
  type AcceptedState,
  advanceSnapshot,
  buildSnapshot,
  type ConfigSnapshot,
  EMPTY_STATE,
  type PendingResource,
} from './config-snapshot.js';
export {
  type ControlPlaneIdentity,
  type ControlPlaneIdentityOptions,
  openControlPlaneIdentity,
} from './control-plane-identity.js';
export { csrPublicKey, csrUriSans, MAX_CSR_PEM_BYTES } from './csr-info.js';
export { ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL, PROTO_DIR, protoRoot } from './proto-root.js';
export type { RawResource } from './resource-decoder.js';
export {
  currentStampPath,
  loadSnapshot,
  readCurrentStamp,
  writeCurrentStamp,
  writeSnapshot,
} from './snapshot-file.js';
export { splitAddresses, TokenFile } from './token-file.js';
export {
  addressHost,
  controlPlaneCredentials,
  controlPlaneUsesTls,
  isLoopbackHost,
  type MeshRoots,
  tlsFailure,
} from './transport.js';
export {
  decodeWaypointResource,
  encodeWaypointResource,
  MAX_WAYPOINT_CONFIG_BYTES,
  WAYPOINT_CONFIG_TYPE_URL,
  waypointResourceName,
} from './waypoint-resource.js';
export {
  backoffDelay,
  DEFAULT_MAX_SNAPSHOT_AGE_MS,
  MAX_RESPONSE_BYTES,
  type NackEvent,
  XdsClient,
  type XdsClientOptions,
  type XdsSubscription,
} from './xds-client.js';
export { XdsMetrics } from './xds-metrics.js';
