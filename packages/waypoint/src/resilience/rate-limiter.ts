import type { RateLimitPolicy } from '../config/waypoint-config.js';
import type { Clock } from './clock.js';

export type RateDecision = { allowed: boolean; limit: number; remaining: number; resetMs: number };

/** Envoy's local rate limit: a token bucket refilled by `tokensPerFill` every `fillIntervalMs`. */
export class TokenBucket {
  #tokens: number;
  #lastFill: number;

  constructor(
    readonly policy: RateLimitPolicy,
    private readonly clock: Clock,
  ) {
    this.#tokens = policy.maxTokens;
    this.#lastFill = clock.now();
  }

  take(): RateDecision {
    const now = this.clock.now();
    const fills = Math.floor((now - this.#lastFill) / this.policy.fillIntervalMs);
    if (fills > 0) {
      this.#tokens = Math.min(this.policy.maxTokens, this.#tokens + fills * this.policy.tokensPerFill);
      this.#lastFill += fills * this.policy.fillIntervalMs;
    }
    const resetMs = this.#lastFill + this.policy.fillIntervalMs - now;
    if (this.#tokens < 1) return { allowed: false, limit: this.policy.maxTokens, remaining: 0, resetMs };
    this.#tokens -= 1;
    return { allowed: true, limit: this.policy.maxTokens, remaining: this.#tokens, resetMs };
  }
}
