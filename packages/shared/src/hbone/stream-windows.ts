import type { Duplex } from 'node:stream';
import { logger } from '../log/index.js';
import {
  MIN_STREAM_WINDOW_BYTES,
  SESSION_STREAM_WINDOWS_BYTES,
  STREAM_WINDOW_BYTES,
} from './hbone-settings.js';

const log = logger('hbone');

/** What StreamWindows needs of a session (H2Connection). */
export interface WindowedSession {
  readonly destroyed: boolean;
  readonly closed: boolean;
  settings(values: { initialWindowSize: number }, callback: () => void): void;
}
/**
 * Window changes in flight at once: a peer slow to acknowledge is not sent a SETTINGS per
 * stream opened or closed (and nghttp2 peers refuse more than 10 unacknowledged).
 */
const MAX_UNACKED_SETTINGS = 4;

/**
 * The per-stream receive window for a session carrying `streams` open streams: the
 * session's budget split between them, rounded down to a power of two (so a stream
 * opening or closing rarely changes it), between the floor and the full window.
 */
export function streamWindowFor(
  streams: number,
  budget = SESSION_STREAM_WINDOWS_BYTES,
  floor = MIN_STREAM_WINDOW_BYTES,
  ceiling = STREAM_WINDOW_BYTES,
): number {
  const share = budget / Math.max(1, streams);
  const pow2 = 2 ** Math.floor(Math.log2(Math.max(1, share)));
  return Math.min(ceiling, Math.max(floor, pow2));
}

/**
 * Keeps the bytes a session may have to buffer for its streams bounded by one budget.
 * H2Connection grants the connection window back as bytes arrive, whether or not the
 * stream's reader took them (so one stalled stream cannot stall its neighbours), so a
 * session's buffered bytes are bounded only by the sum of its stream windows (RFC 9113
 * §6.9): 32 paused streams at 4 MiB each hold 128 MiB, and a paused stream that resumes
 * hands its whole window to the loop in one turn. As streams
 * open, SETTINGS_INITIAL_WINDOW_SIZE shrinks (§6.9.2 applies the change to every open
 * stream), and grows back as they close. A session with a few bulk streams keeps the full
 * window.
 */
export class StreamWindows {
  readonly #session: WindowedSession;
  #streams = 0;
  /** The window last sent (acknowledged or in flight). */
  #window: number;
  /** Our SETTINGS frames not yet acknowledged. */
  #unacked = 0;

  constructor(session: WindowedSession, initial = STREAM_WINDOW_BYTES) {
    this.#session = session;
    this.#window = initial;
  }

  /** Counts `stream` until it closes and adapts the window to the new count. */
  track(stream: Duplex): void {
    this.#streams++;
    // 'close' is emitted once; on() spares once()'s wrapper on every tunnel.
    stream.on('close', () => {
      this.#streams--;
      this.#adapt();
    });
    this.#adapt();
  }

  #adapt(): void {
    const s = this.#session;
    if (s.destroyed || s.closed) return;
    // Shrink at once, even with earlier SETTINGS unacknowledged: a burst of new streams
    // read in one turn then sees the small window before its first DATA. Grow only when
    // nothing is in flight and a quarter more streams would still fit, so a count that
    // hovers at a boundary does not send SETTINGS per stream.
    const shrinkTo = streamWindowFor(this.#streams);
    const growTo = streamWindowFor(Math.ceil(this.#streams * 1.25) + 1);
    let next = this.#window;
    if (shrinkTo < this.#window && this.#unacked < MAX_UNACKED_SETTINGS) next = shrinkTo;
    else if (growTo > this.#window && this.#unacked === 0) next = growTo;
    if (next === this.#window) return;
    this.#window = next;
    this.#unacked++;
    try {
      s.settings({ initialWindowSize: next }, () => {
        this.#unacked--;
        this.#adapt();
      });
    } catch (e) {
      this.#unacked--;
      // Only a session closing under us refuses SETTINGS; its streams go with it.
      log.debug({ err: (e as Error).message }, 'stream window not changed');
    }
  }
}
