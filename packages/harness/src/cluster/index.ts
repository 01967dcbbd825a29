export { cgroup2Mount } from './cgroups.js';
export { Cluster, type ClusterStatus, type UpOptions } from './cluster.js';
export {
  type ClusterSpec,
  gridSpec,
  type PodSpec,
  parseClusterSpec,
  validateClusterSpec,
} from './cluster-spec.js';
export { type ClusterState, listStates } from './cluster-state.js';
export { type ExecResult, podArgv } from './pod-runner.js';
export { type NodeInfo, type PodInfo, PREFIX, type Topology } from './topology.js';
