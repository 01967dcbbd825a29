/** Moved to shared (the waypoint uses them too); re-exported for existing importers. */
export {
  CaClient,
  type CaClientOptions,
  DEFAULT_CA_TIMEOUT_MS,
  parseRootsPem,
  RootsFileWatcher,
} from '@zmesh/shared';
export { AdminServers } from './admin/admin-servers.js';
export {
  AuthorizationStore,
  type AuthorizationStoreOptions,
  type AuthzDestination,
  type Decision,
  type DecisionReason,
  type DryRunVerdict,
  decisionError,
} from './authz/authorization-store.js';
export { type AuthzStaleness, InboundAuthorizer } from './authz/inbound-authorizer.js';
export type { ConnectionAttributes } from './authz/policy-match.js';
export * from './capture/index.js';
export { type AppConnector, loopbackAppConnector } from './forward/app-connector.js';
export { bidirectionalCopy } from './forward/bidirectional-copy.js';
export { drainOnCertChange } from './identity/cert-drain.js';
export { type CertificateSigner, CertManager } from './identity/cert-manager.js';
export { toCredential } from './identity/credential.js';
export { LocalCaSigner } from './identity/local-ca-signer.js';
export { keysDirError, PersistedKeys, TMPFS_MAGIC } from './identity/persisted-keys.js';
export { InboundListener } from './inbound/inbound-listener.js';
export { HbonePool, type PoolKey } from './pool/hbone-pool.js';
export type { ConfigTarget, ConfigUpdate } from './state/config-target.js';
export {
  type ForwardListener as ForwardConfig,
  type LocalConfig,
  loadLocalConfig,
  parseLocalConfig,
} from './state/local-config.js';
export { HBONE_PORT, ProxyState, type Route } from './state/proxy-state.js';
export {
  type AppliedEvent,
  XdsConfigSource,
  type XdsConfigSourceOptions,
} from './state/xds-config-source.js';
export * from './tenancy/index.js';
export { SharedQuotaTable, sharedQuotaBuffer } from './tenancy/shared-quotas.js';
export { ZtunnelWorkers, type ZtunnelWorkersOptions } from './workers/worker-pool.js';
export { DEFAULT_PORTS, Ztunnel } from './ztunnel.js';
export type { InboundLimits, ZtunnelOptions } from './ztunnel-options.js';
