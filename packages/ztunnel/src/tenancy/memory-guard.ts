import { err, ok, type Result, ZmeshError } from '@zmesh/shared';
import { Registry } from 'prom-client';
import { MemoryMetrics } from './tenancy-metrics.js';

/** Node-wide cap on bytes the proxy buffers for all tenants together. */
export const DEFAULT_NODE_BUFFER_CAP = 256 * 1024 * 1024;
/** Fraction of the cap above which the largest consumer is shed first. */
export const DEFAULT_HIGH_WATER = 0.8;

export interface MemoryGuardOptions {
  readonly capBytes?: number;
  readonly highWater?: number;
  readonly registry?: Registry;
}

/**
 * Accounts buffered bytes per tenant against one node-wide cap. Under the high-water mark
 * everyone may buffer; above it the largest consumer is refused first (and named by
 * `shedCandidate()` so the copy loop can pause it); at the cap everyone is refused, so the
 * process never buffers past it.
 */
export class MemoryGuard {
  readonly capBytes: number;
  readonly highWaterBytes: number;
  readonly #byTenant = new Map<string, number>();
  #used = 0;
  readonly #metrics: MemoryMetrics;

  constructor(options: MemoryGuardOptions = {}) {
    this.capBytes = options.capBytes ?? DEFAULT_NODE_BUFFER_CAP;
    const highWater = options.highWater ?? DEFAULT_HIGH_WATER;
    if (!(this.capBytes > 0) || !(highWater > 0 && highWater <= 1)) {
      throw new RangeError(`memory guard needs capBytes > 0 and 0 < highWater <= 1`);
    }
    this.highWaterBytes = Math.floor(this.capBytes * highWater);
    this.#metrics = new MemoryMetrics(options.registry ?? new Registry(), this);
  }

  /** Accounts `n` bytes to `tenant` if the node can take them; see the class comment for the policy. */
  reserve(tenant: string, n: number): Result<void, ZmeshError> {
    if (n <= 0) return ok(undefined);
    const over = this.#used + n > this.capBytes;
    if (over || (this.#used + n > this.highWaterBytes && this.shedCandidate(n) === tenant)) {
      this.#metrics.shed.inc({ tenant });
      return err(
        new ZmeshError('ZM_ERR_TENANT_MEMORY_PRESSURE', { tenant, used: this.#used, limit: this.capBytes }),
      );
    }
    this.add(tenant, n);
    return ok(undefined);
  }

  /** Accounts bytes already buffered (no admission check), e.g. data a socket delivered. */
  add(tenant: string, n: number): void {
    if (n <= 0) return;
    this.#byTenant.set(tenant, (this.#byTenant.get(tenant) ?? 0) + n);
    this.#used += n;
  }

  /** Releases bytes; releasing more than the tenant holds clamps at zero. */
  remove(tenant: string, n: number): void {
    const held = this.#byTenant.get(tenant);
    if (held === undefined || n <= 0) return;
    const freed = Math.min(held, n);
    if (held - freed === 0) this.#byTenant.delete(tenant);
    else this.#byTenant.set(tenant, held - freed);
    this.#used -= freed;
  }

  used(): number {
    return this.#used;
  }

  usageOf(tenant: string): number {
    return this.#byTenant.get(tenant) ?? 0;
  }

  /** Buffered bytes as a fraction of the cap, 0..1. */
  pressure(): number {
    return Math.min(1, this.#used / this.capBytes);
  }

  /**
   * The tenant to shed first once usage (plus `incoming` bytes about to arrive) passes
   * the high-water mark: the largest consumer. Undefined below the mark.
   */
  shedCandidate(incoming = 0): string | undefined {
    if (this.#used + incoming <= this.highWaterBytes) return undefined;
    let largest: string | undefined;
    let most = -1;
    for (const [tenant, bytes] of this.#byTenant) {
      if (bytes > most) [largest, most] = [tenant, bytes];
    }
    return largest;
  }
}
