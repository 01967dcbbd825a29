import { err, type Logger, ok, type Result, ZmeshError } from '@zmesh/shared';
import { Registry } from 'prom-client';
import type { MemoryGuard } from './memory-guard.js';
import { RefusalLog } from './refusal-log.js';
import { type SharedCounter, type SharedQuotaTable, sharedNow } from './shared-quotas.js';
import { QuotaMetrics } from './tenancy-metrics.js';

/** A tenant's connect bucket just after a token was taken from it: what the kernel throttle mirrors. */
export interface ConnectBucket {
  /** Tokens per second, and the bucket's size, in force for this take (contended or the tenant's own). */
  readonly rate: number;
  readonly burst: number;
  /** Tokens left (fractional while refilling). */
  readonly tokens: number;
}

export interface QuotaLimits {
  /** Open connections (inbound and outbound) the tenant may hold at once. */
  readonly maxConnections: number;
  /** Connects (TCP + TLS + CONNECT) in progress at once. */
  readonly maxPendingConnects: number;
  /** Sustained new connections per second (token bucket refill rate). */
  readonly connectRate: number;
  /** Connections that may be opened in a burst (token bucket size). */
  readonly connectBurst: number;
  /** Bytes the proxy may buffer for the tenant. */
  readonly maxBufferedBytes: number;
}

/**
 * Defaults sized for a node shared by a few dozen namespaces: generous enough that a
 * normal workload never meets them, tight enough that one tenant cannot take the node's
 * file descriptors (ulimit 65536), its connect capacity or its buffer cap alone.
 */
export const DEFAULT_QUOTA_LIMITS: QuotaLimits = {
  maxConnections: 4096,
  maxPendingConnects: 256,
  connectRate: 500,
  connectBurst: 1000,
  maxBufferedBytes: 32 * 1024 * 1024,
};

export type QuotaKind = 'connections' | 'pending_connects' | 'connect_rate' | 'buffered_bytes';

/** A held unit of quota; `release()` gives it back once, later calls do nothing. */
export interface Lease {
  readonly tenant: string;
  readonly released: boolean;
  release(): void;
}

export interface TenantQuotasOptions {
  readonly defaults?: Partial<QuotaLimits>;
  readonly overrides?: Readonly<Record<string, Partial<QuotaLimits>>>;
  /** Node-wide buffer accounting; `reserveBytes` also needs its consent when given. */
  readonly memory?: MemoryGuard;
  readonly registry?: Registry;
  /** Milliseconds, monotonic; drives the token buckets and log rate limit. */
  readonly now?: () => number;
  readonly logIntervalMs?: number;
  /** Defaults to `logger('tenancy')`. */
  readonly log?: Logger;
  /**
   * Node-wide counters shared by worker threads (`--workers N`): connections, pending
   * connects and the connect bucket are counted there, so a tenant spread over workers
   * still meets one quota. Buffered bytes stay local.
   */
  readonly shared?: SharedQuotaTable;
}

interface Usage {
  connections: number;
  pending: number;
  bytes: number;
  tokens: number;
  refilledAt: number;
}

/**
 * Per-tenant quotas (docs/design.md §7). Every check returns a Result so the hot path does not
 * throw; a refusal counts in `zmesh_tenant_quota_refused_total{tenant,quota}` and logs at
 * most once per interval per tenant and quota. Only the tenant over quota is refused.
 */
export class TenantQuotas {
  readonly #defaults: QuotaLimits;
  readonly #overrides = new Map<string, Partial<QuotaLimits>>();
  readonly #usage = new Map<string, Usage>();
  readonly #memory: MemoryGuard | undefined;
  readonly #metrics: QuotaMetrics;
  readonly #now: () => number;
  readonly #log: RefusalLog;
  readonly #shared: SharedQuotaTable | undefined;
  #sharedFullLogged = false;

  constructor(options: TenantQuotasOptions = {}) {
    this.#shared = options.shared;
    this.#defaults = checked({ ...DEFAULT_QUOTA_LIMITS, ...options.defaults });
    for (const [tenant, limits] of Object.entries(options.overrides ?? {})) this.setOverride(tenant, limits);
    this.#memory = options.memory;
    this.#metrics = new QuotaMetrics(options.registry ?? new Registry());
    // Shared buckets are refilled by every worker: one clock for all threads.
    this.#now = options.now ?? (options.shared ? sharedNow : () => performance.now());
    this.#log = new RefusalLog(options.logIntervalMs, this.#now, options.log);
  }

  /** Replaces a tenant's overrides (`undefined` returns it to the defaults); holdings are kept. */
  setOverride(tenant: string, limits: Partial<QuotaLimits> | undefined): void {
    if (limits === undefined) this.#overrides.delete(tenant);
    else {
      checked({ ...DEFAULT_QUOTA_LIMITS, ...limits });
      this.#overrides.set(tenant, limits);
    }
  }

  limitsOf(tenant: string): QuotaLimits {
    return { ...this.#defaults, ...this.#overrides.get(tenant) };
  }

  acquireConnection(tenant: string): Result<Lease, ZmeshError> {
    const limit = this.limitsOf(tenant).maxConnections;
    const slot = this.#sharedSlot(tenant);
    if (slot >= 0) return this.#sharedAcquire(tenant, slot, 'connections', limit);
    const u = this.#state(tenant);
    if (u.connections >= limit) return this.#refuse(tenant, 'connections', limit);
    u.connections++;
    return ok(new QuotaLease(tenant, () => this.#drop(tenant, 'connections')));
  }

  acquirePending(tenant: string): Result<Lease, ZmeshError> {
    const limit = this.limitsOf(tenant).maxPendingConnects;
    const slot = this.#sharedSlot(tenant);
    if (slot >= 0) return this.#sharedAcquire(tenant, slot, 'pending', limit);
    const u = this.#state(tenant);
    if (u.pending >= limit) return this.#refuse(tenant, 'pending_connects', limit);
    u.pending++;
    return ok(new QuotaLease(tenant, () => this.#drop(tenant, 'pending')));
  }

  /**
   * Takes one token from the tenant's connect bucket; refused when it is empty. With
   * `contended` (the tenant opens connections fastest on a node under pressure), the
   * bucket refills at that lower rate and holds at most that burst, where they are lower
   * than the tenant's own.
   */
  takeConnectToken(
    tenant: string,
    contended?: { rate: number; burst: number },
  ): Result<ConnectBucket, ZmeshError> {
    const own = this.limitsOf(tenant);
    const limits = contended
      ? {
          ...own,
          connectRate: Math.min(own.connectRate, contended.rate),
          connectBurst: Math.max(1, Math.min(own.connectBurst, contended.burst)),
        }
      : own;
    const slot = this.#sharedSlot(tenant);
    const u = slot >= 0 ? undefined : this.#state(tenant);
    let left: number;
    if (u) {
      this.#refill(u, limits);
      left = u.tokens < 1 ? -1 : --u.tokens;
    } else left = this.#shared!.takeToken(slot, limits.connectRate, limits.connectBurst, this.#now());
    if (left < 0)
      return this.#refuse(
        tenant,
        'connect_rate',
        contended ? `${limits.connectRate}/s while the node is contended` : `${limits.connectRate}/s`,
        { rate: limits.connectRate, burst: limits.connectBurst },
      );
    return ok({ rate: limits.connectRate, burst: limits.connectBurst, tokens: left });
  }

  /** Accounts `n` buffered bytes to the tenant, against its quota and the node's memory guard. */
  reserveBytes(tenant: string, n: number): Result<void, ZmeshError> {
    if (!(n > 0)) return ok(undefined);
    const u = this.#state(tenant);
    const limit = this.limitsOf(tenant).maxBufferedBytes;
    if (u.bytes + n > limit) return this.#refuse(tenant, 'buffered_bytes', limit);
    const node = this.#memory?.reserve(tenant, n);
    if (node && !node.ok) {
      this.#log.refused(tenant, 'node_memory', { tenant, kind: 'node_memory' }, node.error.message);
      return node;
    }
    u.bytes += n;
    return ok(undefined);
  }

  /** Gives back bytes reserved with `reserveBytes`; more than held clamps at zero. */
  releaseBytes(tenant: string, n: number): void {
    const u = this.#usage.get(tenant);
    if (!u || !(n > 0)) return;
    const freed = Math.min(u.bytes, n);
    u.bytes -= freed;
    this.#memory?.remove(tenant, freed);
    this.#forgetIfIdle(tenant, u);
  }

  /** Current holdings, for admin pages and tests. */
  usage(tenant: string): { connections: number; pending: number; bytes: number; tokens: number } {
    const slot = this.#sharedSlot(tenant);
    if (slot >= 0) return { ...this.#shared!.usage(slot), bytes: this.#usage.get(tenant)?.bytes ?? 0 };
    const u = this.#state(tenant);
    this.#refill(u, this.limitsOf(tenant));
    return { connections: u.connections, pending: u.pending, bytes: u.bytes, tokens: u.tokens };
  }

  /** The tenant's node-wide slot, or -1: not shared, or the table is full (then counted here). */
  #sharedSlot(tenant: string): number {
    const shared = this.#shared;
    if (!shared) return -1;
    const slot = shared.slotOf(tenant, this.limitsOf(tenant).connectBurst, this.#now());
    if (slot < 0 && !this.#sharedFullLogged) {
      this.#sharedFullLogged = true;
      this.#log.refused(
        tenant,
        'shared_slots',
        { tenant },
        'node-wide tenant table full: counting per worker',
      );
    }
    return slot;
  }

  #sharedAcquire(
    tenant: string,
    slot: number,
    counter: SharedCounter,
    limit: number,
  ): Result<Lease, ZmeshError> {
    if (!this.#shared!.tryIncrement(slot, counter, limit))
      return this.#refuse(tenant, counter === 'connections' ? 'connections' : 'pending_connects', limit);
    return ok(new QuotaLease(tenant, () => this.#shared!.decrement(slot, counter)));
  }

  #state(tenant: string): Usage {
    let u = this.#usage.get(tenant);
    if (!u) {
      const tokens = this.limitsOf(tenant).connectBurst;
      u = { connections: 0, pending: 0, bytes: 0, tokens, refilledAt: this.#now() };
      this.#usage.set(tenant, u);
    }
    return u;
  }

  #refill(u: Usage, limits: QuotaLimits): void {
    const at = this.#now();
    const elapsed = Math.max(0, at - u.refilledAt) / 1000;
    // An unlimited rate refills at once (and Infinity × 0 would be NaN).
    const earned =
      limits.connectRate === Number.POSITIVE_INFINITY ? limits.connectBurst : elapsed * limits.connectRate;
    u.tokens = Math.min(limits.connectBurst, u.tokens + earned);
    u.refilledAt = at;
  }

  #drop(tenant: string, field: 'connections' | 'pending'): void {
    const u = this.#usage.get(tenant);
    if (!u) return;
    u[field] = Math.max(0, u[field] - 1);
    this.#forgetIfIdle(tenant, u);
  }

  /** Keeps the map to tenants holding something or with a bucket still refilling. */
  #forgetIfIdle(tenant: string, u: Usage): void {
    if (u.connections > 0 || u.pending > 0 || u.bytes > 0) return;
    const limits = this.limitsOf(tenant);
    this.#refill(u, limits);
    if (u.tokens >= limits.connectBurst) this.#usage.delete(tenant);
  }

  /** `extra`: facts for the caller (connect_rate: the `rate` per second and `burst` in force). */
  #refuse(
    tenant: string,
    quota: QuotaKind,
    limit: number | string,
    extra: Record<string, unknown> = {},
  ): Result<never, ZmeshError> {
    this.#metrics.refused.inc({ tenant, quota });
    const error = new ZmeshError('ZM_ERR_TENANT_QUOTA', { tenant, quota, limit, ...extra });
    this.#log.refused(tenant, quota, { tenant, kind: quota, limit }, error.message);
    return err(error);
  }
}

class QuotaLease implements Lease {
  #release: (() => void) | undefined;

  constructor(
    readonly tenant: string,
    release: () => void,
  ) {
    this.#release = release;
  }

  get released(): boolean {
    return this.#release === undefined;
  }

  release(): void {
    const release = this.#release;
    this.#release = undefined;
    release?.();
  }
}

function checked(limits: QuotaLimits): QuotaLimits {
  for (const [name, value] of Object.entries(limits)) {
    if (typeof value !== 'number' || Number.isNaN(value) || value < 0) {
      throw new RangeError(`quota ${name} must be a number >= 0 (Infinity for none), got ${value}`);
    }
  }
  return limits;
}
