/** Time and chance as inputs, so tests of ejection, buckets and backoff need not wait or roll. */
export interface Clock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (ms <= 0 || signal?.aborted) return resolve();
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        signal?.removeEventListener('abort', done);
        resolve();
      }
      signal?.addEventListener('abort', done, { once: true });
    }),
};

/** A clock that moves only when told; sleeps resolve as soon as time passes them. */
export class ManualClock implements Clock {
  #now: number;
  #sleepers: Array<{ at: number; resolve: () => void }> = [];

  constructor(start = 1_000_000) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve) => this.#sleepers.push({ at: this.#now + ms, resolve }));
  }

  advance(ms: number): void {
    this.#now += ms;
    const due = this.#sleepers.filter((s) => s.at <= this.#now);
    this.#sleepers = this.#sleepers.filter((s) => s.at > this.#now);
    for (const s of due) s.resolve();
  }
}
