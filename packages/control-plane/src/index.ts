export {
  type AdminListen,
  type AdminServer,
  MAX_ACK_TIMEOUT_MS,
  MAX_APPLY_BYTES,
  startAdminServer,
} from './admin-server.js';
export { admit, admitWaypointConfigs, type WaypointValidator } from './admission.js';
export { AdsSession } from './ads-session.js';
export {
  loadOrCreateCa,
  loadOrCreateCaInStore,
  ROOT_CERT_FILE,
  ROOT_KEY_FILE,
  writeRootsFile,
} from './ca-files.js';
export {
  authorize,
  createCertificateHandler,
  DEFAULT_CERT_TTL_SECONDS,
  IMPERSONATED_IDENTITY,
  MAX_CERT_TTL_SECONDS,
  type SignCsr,
} from './ca-service.js';
export {
  type CompiledConfig,
  Compiler,
  type CompilerOptions,
  compile,
  DATAPLANE_MODE_LABEL,
  GATEWAY_NAME_LABEL,
  HBONE_PORT,
  USE_WAYPOINT_LABEL,
} from './compiler.js';
export { ConfigStore, type ConfigStoreOptions, objectsOf, type StoreView } from './config-store.js';
export {
  ControlPlane,
  type ControlPlaneOptions,
  convertForZtunnel,
  sharedNodeTokenKey,
  type WaypointStatus,
} from './control-plane.js';
export { ControlPlaneMetrics } from './cp-metrics.js';
export type { L7PolicyApplied, PodExplanation } from './explain-pod.js';
export * from './k8s-objects.js';
export {
  DEFAULT_ACK_TIMEOUT_MS,
  DEFAULT_WAYPOINT_NAME,
  type RolloutReport,
  setNamespaceWaypoint,
  waitForAcks,
} from './namespace-waypoint.js';
export { NodeTokens } from './node-tokens.js';
export { parseObject } from './parse-object.js';
export { type ProxyReport, ProxyStatusRegistry, type TypeReport } from './proxy-status.js';
export { type CachedResource, ResourceCache } from './resource-cache.js';
export { type RouteCondition, type RouteStatus, routeStatuses } from './route-status.js';
export { SqliteStateStore, STATE_DB_FILE, sqliteAvailable } from './store/sqlite-store.js';
export {
  MemoryStateStore,
  type StateChange,
  type StateStore,
  type StoredState,
} from './store/state-store.js';
export { SERVED_TYPES, XdsServer, type XdsServerOptions } from './xds-server.js';
