export { slope } from './bench/stats.js';
export * from './bypass/index.js';
export { describeEvents } from './cli/describe-command.js';
export { type PodDescription, podDescriptionText } from './cli/describe-pod-command.js';
export { getTable } from './cli/get-command.js';
export { type ProxyRow, proxyStatusTable, type RouteRow, routeStatusTable } from './cli/operator-commands.js';
export { type ConfigDump, ztunnelConfigTable, ztunnelConfigTables } from './cli/ztunnel-config-command.js';
export * from './cluster/index.js';
export { collectMesh } from './dashboard/collect.js';
export { L7_POLICY_YAML, L7_ROUTE_YAML, type L7Lab, type L7LabOptions, startL7Lab } from './demo/l7-lab.js';
export * from './install/index.js';
export * from './kube-api/index.js';
export { ControlPlaneLink } from './mesh/control-plane-link.js';
export { LocalMesh } from './mesh/local-mesh.js';
export {
  baseDocs,
  clientForwards,
  forwardConfigs,
  type Mesh,
  podDoc,
  startMesh,
  startXdsNode,
  waitFor,
  type XdsMesh,
  type XdsNode,
} from './mesh/mesh.js';
export { MeshControlPlane, type ProxyStatusRow } from './mesh/mesh-control-plane.js';
export { controlPlaneUid, meshYaml } from './mesh/mesh-objects.js';
export {
  type ClusterMeshOptions,
  type ControlPlaneMode,
  type MeshService,
  type MeshSpec,
  VIP_PREFIX,
} from './mesh/mesh-spec.js';
export { netnsHttp } from './mesh/netns-http.js';
export { PEER_SERVER, parseRateResult, RATE_CLIENT, type RateResult } from './mesh/pod-programs.js';
export * from './outage/index.js';
export { STEADY_SERVER } from './outage/steady-traffic.js';
export { type MeshPeerOutcome, type SoakReport, soakTable } from './soak/report.js';
export { runSoak, type SoakOptions } from './soak/soak.js';
export { judge, type SoakSample, type SoakSeries, soakLimits } from './soak/verdict.js';
export {
  type NodeUpgrade,
  runUpgradeDrill,
  type UpgradeDrillOptions,
  type UpgradeDrillReport,
} from './upgrade/upgrade-drill.js';
export { UPGRADE_CLIENT, type UpgradeTrafficResult } from './upgrade/upgrade-traffic.js';
