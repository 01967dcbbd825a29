/** Window of a tenant's attempt rate (exponential decay). */
export const ATTEMPT_WINDOW_MS = 1000;
/** A tenant whose decayed rate falls below this leaves the table. */
const FORGET_BELOW = 0.5;

/**
 * Per-tenant rate of events (connect attempts) over about the last second, decaying
 * exponentially, and the fastest other tenant's: enough to tell which tenant is opening
 * connections fastest. Quiet tenants are forgotten, so the table stays as small as the set
 * of tenants active now.
 */
export class AttemptRates {
  readonly #rates = new Map<string, { rate: number; at: number }>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Counts one event of `tenant`; returns its rate (per second) and the fastest other's. */
  record(tenant: string): { rate: number; fastestOther: number } {
    const now = this.now();
    let rate = 0;
    let fastestOther = 0;
    for (const [name, r] of this.#rates) {
      const decayed = r.rate * Math.exp(-(now - r.at) / ATTEMPT_WINDOW_MS);
      if (name === tenant) rate = decayed;
      else if (decayed < FORGET_BELOW) this.#rates.delete(name);
      else fastestOther = Math.max(fastestOther, decayed);
    }
    rate += 1;
    this.#rates.set(tenant, { rate, at: now });
    return { rate, fastestOther };
  }

  get size(): number {
    return this.#rates.size;
  }
}
