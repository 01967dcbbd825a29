/**
 * Envoy's retry budget (cluster circuit_breakers.retry_budget): retries in flight may be
 * at most `percent` of the requests in flight, but at least `minConcurrency`. A retry
 * holds its slot from the decision to retry (backoff included) until its attempt ends, so
 * a backend that fails everything sees at most ~(1 + percent) × requests attempts.
 */
export class RetryBudget {
  #activeRequests = 0;
  #activeRetries = 0;

  constructor(
    readonly percent = 20,
    readonly minConcurrency = 3,
  ) {}

  requestStarted(): void {
    this.#activeRequests++;
  }

  requestEnded(): void {
    this.#activeRequests--;
  }

  /** Takes a retry slot; the caller must release() it when the retried attempt ends. */
  tryAcquire(): boolean {
    const limit = Math.max(this.minConcurrency, Math.floor((this.#activeRequests * this.percent) / 100));
    if (this.#activeRetries >= limit) return false;
    this.#activeRetries++;
    return true;
  }

  release(): void {
    this.#activeRetries--;
  }

  get activeRequests(): number {
    return this.#activeRequests;
  }

  get activeRetries(): number {
    return this.#activeRetries;
  }
}

/** RFC 9110 §9.2.2: methods whose repetition has the same effect as one request. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

export function isIdempotent(method: string): boolean {
  return IDEMPOTENT.has(method);
}

/** Full-jitter exponential backoff (AWS architecture blog): uniform in [0, min(max, base·2^n)]. */
export function backoffMs(retry: number, baseMs: number, maxMs: number, random: () => number): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** retry);
  return Math.floor(random() * ceiling);
}
