import type { OutlierPolicy } from '../config/waypoint-config.js';
import type { Clock } from './clock.js';

interface HostState {
  consecutive5xx: number;
  ejections: number;
  ejectedUntil?: number;
}

/**
 * Envoy's consecutive-5xx outlier detection for one backend service. A host is ejected as
 * soon as it reaches the threshold, for baseEjection × (times ejected), capped at
 * maxEjection; it is readmitted at the first interval sweep after that. At most
 * maxEjectionPercent of hosts are out at once (but at least one may be, as in Envoy), and
 * never the last host standing: a lone failing host is better than no host.
 */
export class OutlierDetector {
  readonly #hosts = new Map<string, HostState>();
  #nextSweep: number;

  constructor(
    private policy: OutlierPolicy,
    private readonly clock: Clock,
    private readonly onChange?: (host: string, ejected: boolean) => void,
  ) {
    this.#nextSweep = clock.now() + policy.intervalMs;
  }

  setPolicy(policy: OutlierPolicy): void {
    this.policy = policy;
  }

  /** The hosts of `all` that may take traffic now. */
  available<T extends { key: string }>(all: readonly T[]): T[] {
    this.#sweep(all);
    return all.filter((h) => this.#hosts.get(h.key)?.ejectedUntil === undefined);
  }

  isEjected(key: string): boolean {
    return this.#hosts.get(key)?.ejectedUntil !== undefined;
  }

  /** `failure` is a 5xx, reset or connect failure (Envoy's consecutive_5xx counts all three). */
  record(key: string, failure: boolean, hostCount: number): void {
    if (this.policy.consecutive5xx <= 0) return;
    const h = this.#state(key);
    if (!failure) {
      h.consecutive5xx = 0;
      return;
    }
    h.consecutive5xx++;
    if (h.ejectedUntil !== undefined || h.consecutive5xx < this.policy.consecutive5xx) return;
    if (!this.#mayEject(hostCount)) return;
    h.ejections++;
    const ms = Math.min(this.policy.baseEjectionMs * h.ejections, this.policy.maxEjectionMs);
    h.ejectedUntil = this.clock.now() + ms;
    this.onChange?.(key, true);
  }

  #mayEject(hostCount: number): boolean {
    const ejected = [...this.#hosts.values()].filter((h) => h.ejectedUntil !== undefined).length;
    const cap = Math.max(1, Math.floor((hostCount * this.policy.maxEjectionPercent) / 100));
    return ejected < cap && ejected < hostCount - 1;
  }

  #sweep(all: readonly { key: string }[]): void {
    const now = this.clock.now();
    if (now < this.#nextSweep) return;
    this.#nextSweep = now + this.policy.intervalMs;
    const present = new Set(all.map((h) => h.key));
    for (const [key, h] of this.#hosts) {
      if (!present.has(key)) this.#hosts.delete(key);
      else if (h.ejectedUntil !== undefined && now >= h.ejectedUntil) {
        h.ejectedUntil = undefined;
        h.consecutive5xx = 0;
        this.onChange?.(key, false);
      }
    }
  }

  #state(key: string): HostState {
    let h = this.#hosts.get(key);
    if (!h) {
      h = { consecutive5xx: 0, ejections: 0 };
      this.#hosts.set(key, h);
    }
    return h;
  }
}
