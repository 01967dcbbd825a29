/**
 * Envoy's premature-reset ratio (ConnectionManagerImpl::maybeDrainDueToPrematureResets): with
 * `ended` peer streams ended in all and `premature` of them reset prematurely, the session is
 * drained when premature resets are at least half of `ended`, or, while fewer than `total`
 * streams have ended, at least half of `total`.
 */
export function prematureRatioExceeded(premature: number, ended: number, total: number): boolean {
  if (ended === 0) return false;
  return ended < total ? premature * 2 >= total : premature * 2 >= ended;
}

/**
 * Counts premature peer stream resets in a fixed window (CVE-2023-44487, "rapid reset"): a client
 * that opens and cancels streams makes the server start work it never pays for.
 */
export class ResetCounter {
  readonly #limit: number;
  readonly #windowMs: number;
  #windowStart = 0;
  #count = 0;

  constructor(limit: number, windowMs: number) {
    this.#limit = limit;
    this.#windowMs = windowMs;
  }

  /** Records one reset; true when the limit is exceeded within the current window. */
  hit(now = Date.now()): boolean {
    if (now - this.#windowStart >= this.#windowMs) {
      this.#windowStart = now;
      this.#count = 0;
    }
    this.#count++;
    return this.#count > this.#limit;
  }

  get count(): number {
    return this.#count;
  }
}
