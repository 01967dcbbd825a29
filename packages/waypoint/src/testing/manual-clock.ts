import type { Clock } from '../resilience/clock.js';

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
