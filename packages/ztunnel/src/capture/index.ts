export {
  BpfCapture,
  type BpfCaptureOptions,
  type CaptureCounters,
  type CapturePod,
  type ConnectionKey,
  fdOf,
} from './bpf-capture.js';
export { HBONE_PORT, HOOKS, type OriginalDestination, OUTBOUND_PORT, PIN_ROOT } from './bpf-layout.js';
export { CaptureMetrics } from './capture-metrics.js';
export {
  connectInNetns,
  inNetns,
  type ListenOptions,
  listenInNetns,
  type Netns,
  NetnsHandle,
  netnsCookieOf,
  socketInNetns,
} from './netns-listener.js';
export { checkPodNetns, findPodCgroup, kubeletPodCgroups, netnsIdentity } from './pod-cgroup.js';
export { peerCred, SysError } from './sys.js';
export {
  type AddWorkloadRequest,
  type WorkloadHandler,
  ZdsClient,
  type ZdsClientOptions,
} from './zds-client.js';
