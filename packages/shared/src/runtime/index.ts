export * from './build-info.js';
export { checkoutPath } from './checkout.js';
export {
  DEFAULT_FD_RESERVE,
  FdReserve,
  type FdReserveInputs,
  nofileLimit,
  openFdCount,
} from './fd-reserve.js';
export {
  guarded,
  guardedInterval,
  guardedTimeout,
  registerTaskFailures,
  taskFailures,
} from './guarded-task.js';
export {
  BUSY_UTILIZATION,
  compactingGc,
  IdleReclaim,
  type IdleReclaimInputs,
  MAX_PAUSE_SHARE,
  MIN_GAP_MS,
  QUIET_UTILIZATION,
  RECLAIM_SAMPLE_MS,
} from './idle-reclaim.js';
export {
  CPU_PROFILE_MAX_SECONDS,
  HEAP_SNAPSHOT_MAX_BYTES,
  InspectorProfiles,
  isLoopback,
} from './inspector-profiles.js';
export { utilizationProbe } from './loop-utilization.js';
export { mallocTrim } from './malloc-trim.js';
export { cgroup2MountOf, type Mount, readMounts } from './mounts.js';
export { isScriptMain } from './script-main.js';
