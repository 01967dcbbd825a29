export {
  ByteFairness,
  type ByteFairnessOptions,
  DEFAULT_LAG_THRESHOLD_MS,
  DEFAULT_MAX_BUFFERED_PER_TENANT,
  DEFAULT_PAUSE_MS,
  DEFAULT_TICK_MS,
  DEFAULT_WINDOW_MS,
  MAX_PAUSE_MS,
  type TenantByteStats,
} from './byte-fairness.js';
export {
  DEFAULT_CONTROL_SLOTS,
  DEFAULT_MAX_IN_FLIGHT,
  DEFAULT_MAX_QUEUED_PER_TENANT,
  DEFAULT_QUANTUM,
  DEFAULT_TENANT_SHARE_OF_SLOTS,
  FairScheduler,
  type FairSchedulerOptions,
  type ScheduleOptions,
  type SchedulerMode,
} from './fair-scheduler.js';
export {
  DEFAULT_HIGH_WATER,
  DEFAULT_NODE_BUFFER_CAP,
  MemoryGuard,
  type MemoryGuardOptions,
} from './memory-guard.js';
export { DEFAULT_REFUSAL_LOG_INTERVAL_MS, RefusalLog } from './refusal-log.js';
export { CONTROL_TENANT, TENANT_LABEL, type TenantSource, tenantOf } from './tenant-of.js';
export {
  DEFAULT_QUOTA_LIMITS,
  type Lease,
  type QuotaKind,
  type QuotaLimits,
  TenantQuotas,
  type TenantQuotasOptions,
} from './tenant-quotas.js';
