import type { AccessLogPolicy } from '@zmesh/shared';
import type { PassthroughPolicy } from '../outbound/outbound-handler.js';
import type { TenancyOptions } from '../outbound/tenant-admission.js';
import type { ConfigUpdate } from '../state/config-target.js';
import type { InboundLimits } from '../ztunnel-options.js';

/**
 * What the main thread hands a worker at its start (`workerData`, a structured clone; the
 * tenancy's `sharedQuotas` buffer is shared, not copied). Everything else arrives as calls
 * on the worker's channel (config, add, del, metrics, dump, roots, staleness, stop: worker-entry.ts).
 */
export interface WorkerInit {
  index: number;
  /** Restarts of this worker slot so far (a restarted worker logs it). */
  generation: number;
  node: string;
  address: string;
  trustDomain: string;
  roots: string[];
  certTtlSeconds?: number;
  certBackoff?: { initialMs: number; maxMs: number };
  passthrough: PassthroughPolicy;
  tenancy: TenancyOptions;
  accessLog?: AccessLogPolicy;
  inboundLimits?: InboundLimits;
  pool?: { maxStreamsPerConnection?: number; idleTimeoutMs?: number };
  /** `--persist-keys`: the key directory (checked by the main thread); each worker keeps its pods' keys there. */
  persistKeys?: string;
  /** Capture mode: the BPF pin scope and the cgroup root (enrolments come from the main thread). */
  capture?: { scope: string; cgroupRoot: string };
}

/** A config push: one version, applied whole by each worker in one turn of its loop. */
export interface ConfigPush {
  version: number;
  update: ConfigUpdate;
  /** Explicit-proxy mode: the local workloads this worker serves (capture mode: its enrolled pods). */
  assigned?: string[];
}

/** What `dump` answers: the worker's view for /config_dump and readiness. */
export interface WorkerDump {
  index: number;
  threadId: number;
  /** The last config version this worker applied (the main thread's numbering). */
  version: number;
  readiness: { ready: boolean; reasons: string[] };
  configDump: unknown;
}

/** The one method a worker calls on the main thread: the CA client lives there. */
export interface SignRequest {
  csrPem: string;
  identity: string;
  ttlSeconds: number;
}
