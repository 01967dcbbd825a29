/**
 * Window of a tenant's attempt rate (exponential decay). A quarter second tells a burst
 * from its first few dozen connects: with a second, a tenant had 100 connects in before
 * its rate read 100/s, and ~250 of a hoard's connects landed on a busy node in 0.4 s.
 */
const ATTEMPT_WINDOW_MS = 250;
/** A tenant whose decayed count falls below this leaves the table. */
const FORGET_BELOW = 0.5;
const PER_SECOND = 1000 / ATTEMPT_WINDOW_MS;

/**
 * Per-tenant rate of events (connect attempts) over about the last quarter second,
 * decaying exponentially, in events per second, and the fastest other tenant's: enough
 * to tell which tenant is opening connections fastest. Quiet tenants are forgotten, so
 * the table stays as small as the set of tenants active now.
 */
export class AttemptRates {
  /** Decayed event counts: a steady rate r per second holds about r × window / 1000. */
  readonly #counts = new Map<string, { count: number; at: number }>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Counts one event of `tenant`; returns its rate (per second) and the fastest other's. */
  record(tenant: string): { rate: number; fastestOther: number } {
    const now = this.now();
    let count = 0;
    let fastestOther = 0;
    for (const [name, c] of this.#counts) {
      const decayed = c.count * Math.exp(-(now - c.at) / ATTEMPT_WINDOW_MS);
      if (name === tenant) count = decayed;
      else if (decayed < FORGET_BELOW) this.#counts.delete(name);
      else fastestOther = Math.max(fastestOther, decayed);
    }
    count += 1;
    this.#counts.set(tenant, { count, at: now });
    return { rate: count * PER_SECOND, fastestOther: fastestOther * PER_SECOND };
  }

  get size(): number {
    return this.#counts.size;
  }
}
