import { ZmeshError } from '../../errors/index.js';
import { DEFAULT_FLOOD_LIMITS, type H2FloodLimits, PREMATURE_RESET_LIFETIME_MS } from './flood-limits.js';

/**
 * Envoy's premature-reset ratio (ConnectionManagerImpl::maybeDrainDueToPrematureResets): with
 * `ended` peer streams ended in all and `premature` of them reset prematurely, the session is
 * drained when premature resets are at least half of `ended`, or, while fewer than `total`
 * streams have ended, at least half of `total`.
 */
function prematureRatioExceeded(premature: number, ended: number, total: number): boolean {
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

/**
 * Envoy's isPrematureRstStream: a peer's reset (of any code, NO_ERROR too) of a stream not yet
 * answered, within PREMATURE_RESET_LIFETIME_MS of its opening. A reset of a stream that was
 * answered, or has lived longer, is an ordinary end.
 */
export function isPrematureReset(answered: boolean, openedAt: number, now = Date.now()): boolean {
  return !answered && now - openedAt <= PREMATURE_RESET_LIFETIME_MS;
}

/** The bounds PrematureResets judges by: H2FloodLimits' reset fields. */
export type PrematureResetLimits = Pick<H2FloodLimits, 'resets' | 'resetWindowMs' | 'prematureResetStreams'>;

/**
 * One server connection's premature peer resets (CVE-2023-44487, "rapid reset"), judged as
 * Envoy judges them: more than `resets` within `resetWindowMs` (ResetCounter), or Envoy's ratio
 * of the peer's ended streams (prematureRatioExceeded). The HBONE server's H2Connection and the
 * waypoint's HTTP/2 frontend (node:http2 sessions) both count through this one rule.
 */
export class PrematureResets {
  readonly #limits: PrematureResetLimits;
  readonly #window: ResetCounter;
  #ended = 0;
  #premature = 0;

  constructor(limits: PrematureResetLimits = DEFAULT_FLOOD_LIMITS) {
    this.#limits = limits;
    this.#window = new ResetCounter(limits.resets, limits.resetWindowMs);
  }

  /** A peer stream ended (closed or reset); for a premature reset, after `reset` for it. */
  streamEnded(): void {
    this.#ended++;
  }

  /**
   * Counts one premature reset (its stream among the ended ones, as Envoy does, before its
   * `streamEnded`); the breach to close the connection with when it goes over a bound.
   */
  reset(now = Date.now()): ZmeshError | undefined {
    this.#premature++;
    const { resets: limit, resetWindowMs: windowMs, prematureResetStreams: total } = this.#limits;
    const ended = this.#ended + 1;
    if (this.#window.hit(now))
      return new ZmeshError('ZM_ERR_HBONE_RAPID_RESET', {
        count: this.#window.count,
        within: `${windowMs} ms`,
        limit,
      });
    if (prematureRatioExceeded(this.#premature, ended, total))
      return new ZmeshError('ZM_ERR_HBONE_RAPID_RESET', {
        count: this.#premature,
        within: `the session (${ended} streams ended)`,
        limit: `half of ${Math.max(ended, total)}`,
      });
    return undefined;
  }
}
