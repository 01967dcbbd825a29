import { Counter, type Registry } from 'prom-client';
import { spiffeIdOf, type Workload } from '../model/workload.js';
import { err, ok, type Result } from '../result.js';
import { accessLogger, type Logger, logger } from './logger.js';

/**
 * Connection access logs: one structured line per closed (or refused) connection, like
 * Istio's ztunnel, with who talked to whom, how much and how it ended. Per namespace the
 * lines are off, on, or sampled; a token bucket bounds lines per second for the whole
 * process, so a connection storm cannot flood the log: what it drops is counted, and said
 * in one line at most every SUMMARY_INTERVAL_MS.
 */
export type AccessLogMode = { kind: 'off' } | { kind: 'on' } | { kind: 'sample'; fraction: number };

export interface AccessLogPolicy {
  /** For namespaces without their own mode. */
  mode: AccessLogMode;
  namespaces: ReadonlyMap<string, AccessLogMode>;
  /** Lines per second, sustained; `burst` more may go out at once. */
  ratePerSecond: number;
  burst: number;
}

export const DEFAULT_ACCESS_LOG_RATE = 100;
export const DEFAULT_ACCESS_LOG_BURST = 200;
const SUMMARY_INTERVAL_MS = 10_000;

export const DEFAULT_ACCESS_LOG_POLICY: AccessLogPolicy = {
  mode: { kind: 'on' },
  namespaces: new Map(),
  ratePerSecond: DEFAULT_ACCESS_LOG_RATE,
  burst: DEFAULT_ACCESS_LOG_BURST,
};

/** `off`, `on` or `sample:F` with F in (0, 1]. */
export function parseAccessLogMode(text: string): Result<AccessLogMode, string> {
  if (text === 'off' || text === 'on') return ok({ kind: text });
  const m = /^sample:(0?\.\d+|1(\.0*)?)$/.exec(text);
  if (m && Number(m[1]) > 0) return ok({ kind: 'sample', fraction: Number(m[1]) });
  return err(`want off, on or sample:F with F in (0, 1], got ${JSON.stringify(text)}`);
}

/** `ns=mode,ns=mode`: per-namespace modes. */
export function parseNamespaceModes(text: string): Result<Map<string, AccessLogMode>, string> {
  const out = new Map<string, AccessLogMode>();
  for (const part of text.split(',').filter(Boolean)) {
    const [ns, mode, ...rest] = part.split('=');
    if (!ns || mode === undefined || rest.length > 0 || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(ns))
      return err(`want namespace=mode, got ${JSON.stringify(part)}`);
    const parsed = parseAccessLogMode(mode);
    if (!parsed.ok) return err(`${ns}: ${parsed.error}`);
    out.set(ns, parsed.value);
  }
  return ok(out);
}

/** One connection as it ended. Identities are SPIFFE IDs; addresses `host:port`. */
export interface ConnectionRecord {
  direction: 'outbound' | 'inbound';
  src: { identity?: string; address?: string; workload?: string; namespace?: string };
  dst: { identity?: string; address: string; workload?: string; namespace?: string; service?: string };
  /** How it was carried: an HBONE tunnel, through a waypoint, plain TCP outside the mesh, or plaintext into a PERMISSIVE workload. */
  via?: 'hbone' | 'waypoint' | 'passthrough' | 'plaintext';
  /** The original client, when a waypoint carried it (`forwarded`). */
  originalSource?: string;
  bytesSent: number;
  bytesReceived: number;
  durationMs: number;
  result: 'ok' | 'refused' | 'error';
  /** Envoy/Istio response flag ('-' when none). */
  flag: string;
  /** The ZM_ERR_* code of a refusal or error. */
  code?: string;
}

export interface AccessLogInputs {
  policy?: AccessLogPolicy;
  /** Where lines go (default: the batched access logger, scope `access`). */
  sink?: Pick<Logger, 'info'>;
  registry?: Registry;
  now?: () => number;
  random?: () => number;
}

export class AccessLog {
  #policy: AccessLogPolicy;
  readonly #sink: Pick<Logger, 'info'>;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #lines: Counter<'result'> | undefined;
  #tokens: number;
  #refilledAt: number;
  #dropped = 0;
  #summaryAt = 0;

  constructor(inputs: AccessLogInputs = {}) {
    this.#policy = inputs.policy ?? DEFAULT_ACCESS_LOG_POLICY;
    this.#sink = inputs.sink ?? accessLogger('access');
    this.#now = inputs.now ?? Date.now;
    this.#random = inputs.random ?? Math.random;
    this.#tokens = this.#policy.burst;
    this.#refilledAt = this.#now();
    this.#lines = inputs.registry
      ? new Counter({
          name: 'zmesh_access_log_lines_total',
          help: 'Connection access-log lines: written, sampled out, or dropped over the rate bound',
          labelNames: ['result'],
          registers: [inputs.registry],
        })
      : undefined;
  }

  setPolicy(policy: AccessLogPolicy): void {
    this.#policy = policy;
    this.#tokens = Math.min(this.#tokens, policy.burst);
  }

  /**
   * Logs `r` under the mode of `namespace` (the workload on this node's side: the source for
   * outbound, the destination for inbound). Never throws.
   */
  record(namespace: string | undefined, r: ConnectionRecord): void {
    try {
      const mode = (namespace && this.#policy.namespaces.get(namespace)) || this.#policy.mode;
      if (mode.kind === 'off') return;
      if (mode.kind === 'sample' && this.#random() >= mode.fraction) {
        this.#lines?.inc({ result: 'sampled_out' });
        return;
      }
      if (!this.#take()) {
        this.#dropped++;
        this.#lines?.inc({ result: 'dropped' });
        this.#summarize();
        return;
      }
      this.#lines?.inc({ result: 'written' });
      this.#sink.info(lineOf(r), 'connection');
    } catch {
      // A log line is never worth a connection's, or the process's, failure.
    }
  }

  #take(): boolean {
    const now = this.#now();
    const { ratePerSecond, burst } = this.#policy;
    this.#tokens = Math.min(burst, this.#tokens + ((now - this.#refilledAt) / 1000) * ratePerSecond);
    this.#refilledAt = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  #summarize(): void {
    const now = this.#now();
    if (now - this.#summaryAt < SUMMARY_INTERVAL_MS) return;
    this.#summaryAt = now;
    logger('access').warn(
      { dropped: this.#dropped, ratePerSecond: this.#policy.ratePerSecond },
      'access-log lines dropped over the rate bound',
    );
    this.#dropped = 0;
  }
}

/** One key per field, flat, in a fixed order: what `jq` and log pipelines read. */
function lineOf(r: ConnectionRecord): Record<string, unknown> {
  return {
    direction: r.direction,
    src_identity: r.src.identity ?? '-',
    src_address: r.src.address ?? '-',
    src_workload: r.src.workload ?? '-',
    src_namespace: r.src.namespace ?? '-',
    dst_identity: r.dst.identity ?? '-',
    dst_address: r.dst.address,
    dst_workload: r.dst.workload ?? '-',
    dst_namespace: r.dst.namespace ?? '-',
    dst_service: r.dst.service ?? '-',
    via: r.via ?? '-',
    ...(r.originalSource ? { original_src: r.originalSource } : {}),
    bytes_sent: r.bytesSent,
    bytes_received: r.bytesReceived,
    duration_ms: r.durationMs,
    result: r.result,
    response_flags: r.flag,
    ...(r.code ? { error_code: r.code } : {}),
  };
}

/** A workload's identity, name and namespace, as access-log fields. */
export function accessLogFields(w: Workload): { identity: string; workload: string; namespace: string } {
  return { identity: spiffeIdOf(w), workload: w.workloadName || w.name, namespace: w.namespace };
}
