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
  /**
   * `--workers N`: the node's buffered bytes, summed over workers (shared-quotas.ts), so the
   * cap is the node's. This guard's own bytes (its tenants, its metric) stay here.
   */
  readonly shared?: SharedTotal;
}

/** A figure each worker publishes for itself and every worker can read summed. */
export interface SharedTotal {
  publish(mine: number): void;
  total(): number;
}

/** Each worker's figure is an Int32 cell. */
const MAX_SHARED_CAP = 2 ** 31 - 1;

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
  readonly #shared: SharedTotal | undefined;
  readonly #metrics: MemoryMetrics;

  constructor(options: MemoryGuardOptions = {}) {
    this.capBytes = options.capBytes ?? DEFAULT_NODE_BUFFER_CAP;
    const highWater = options.highWater ?? DEFAULT_HIGH_WATER;
    if (!(this.capBytes > 0) || !(highWater > 0 && highWater <= 1)) {
      throw new RangeError(`memory guard needs capBytes > 0 and 0 < highWater <= 1`);
    }
    if (options.shared && this.capBytes > MAX_SHARED_CAP)
      throw new RangeError(`memory guard: a cap shared by workers is at most ${MAX_SHARED_CAP} bytes`);
    this.#shared = options.shared;
    this.highWaterBytes = Math.floor(this.capBytes * highWater);
    this.#metrics = new MemoryMetrics(options.registry ?? new Registry(), this);
  }

  /** Accounts `n` bytes to `tenant` if the node can take them; see the class comment for the policy. */
  reserve(tenant: string, n: number): Result<void, ZmeshError> {
    if (n <= 0) return ok(undefined);
    // With workers, two may pass this check at once: the cap is overshot by at most one
    // reservation per worker, which a compare-and-swap on every chunk would cost to prevent.
    const used = this.nodeUsed();
    if (used + n > this.capBytes || (used + n > this.highWaterBytes && this.shedCandidate(n) === tenant)) {
      this.#metrics.shed.inc({ tenant });
      return err(
        new ZmeshError('ZM_ERR_TENANT_MEMORY_PRESSURE', {
          tenant,
          used: this.nodeUsed(),
          limit: this.capBytes,
        }),
      );
    }
    this.#account(tenant, n);
    return ok(undefined);
  }

  /** Accounts bytes already buffered (no admission check), e.g. data a socket delivered. */
  add(tenant: string, n: number): void {
    if (n <= 0) return;
    this.#account(tenant, n);
  }

  #account(tenant: string, n: number): void {
    this.#byTenant.set(tenant, (this.#byTenant.get(tenant) ?? 0) + n);
    this.#used += n;
    this.#shared?.publish(Math.min(this.#used, MAX_SHARED_CAP));
  }

  /** Releases bytes; releasing more than the tenant holds clamps at zero. */
  remove(tenant: string, n: number): void {
    const held = this.#byTenant.get(tenant);
    if (held === undefined || n <= 0) return;
    const freed = Math.min(held, n);
    if (held - freed === 0) this.#byTenant.delete(tenant);
    else this.#byTenant.set(tenant, held - freed);
    this.#used -= freed;
    this.#shared?.publish(Math.min(this.#used, MAX_SHARED_CAP));
  }

  /** Bytes this guard's tenants hold (with workers: this worker's; the merged metric sums them). */
  used(): number {
    return this.#used;
  }

  /** Bytes buffered on the whole node: what the cap and the high-water mark are judged on. */
  nodeUsed(): number {
    return this.#shared ? this.#shared.total() : this.#used;
  }

  usageOf(tenant: string): number {
    return this.#byTenant.get(tenant) ?? 0;
  }

  /** Buffered bytes as a fraction of the cap, 0..1. */
  pressure(): number {
    return Math.min(1, this.nodeUsed() / this.capBytes);
  }

  /**
   * The tenant to shed first once usage (plus `incoming` bytes about to arrive) passes
   * the high-water mark: the largest consumer (with workers: the node's usage, this worker's
   * largest consumer, so each worker sheds its own heaviest tenant). Undefined below the mark.
   */
  shedCandidate(incoming = 0): string | undefined {
    if (this.nodeUsed() + incoming <= this.highWaterBytes) return undefined;
    let largest: string | undefined;
    let most = -1;
    for (const [tenant, bytes] of this.#byTenant) {
      if (bytes > most) [largest, most] = [tenant, bytes];
    }
    return largest;
  }
}
