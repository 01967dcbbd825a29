import type { Duplex } from 'node:stream';
import { guardedTimeout, H2ErrorCode, isResettableStream, resetStream } from '@zmesh/shared';

/** How a copied pair ends (ByteFairness): which side ended cleanly, and ending the other. */

/** Both directions of `s` ended (its end read and its own end flushed): a clean close. */
export function cleanlyEnded(s: Duplex): boolean {
  return s.readableEnded && s.writableFinished;
}

/**
 * How long the surviving side of a cleanly ended pair may take to flush what it still
 * holds for its peer (a socket's unsent tail, a stream's DATA waiting for window) before it
 * is destroyed anyway: a peer that never reads cannot hold it forever.
 */
const CLEAN_END_GRACE_MS = 10_000;

/**
 * Ends `s` after its pair closed. Abruptly: destroyed at once, an HTTP/2 stream reset
 * (CANCEL) so its peer lets go. Cleanly: its own end goes out first, then it is destroyed;
 * destroying it at once dropped the tail still queued in it (the last ~90 KB of an echo
 * whose HTTP/2 stream closed before the app socket had flushed).
 */
export function teardown(s: Duplex, abrupt: boolean): void {
  if (abrupt || s.destroyed || s.writableFinished) {
    if (abrupt && isResettableStream(s)) resetStream(s, H2ErrorCode.CANCEL);
    s.destroy();
    return;
  }
  const timer = guardedTimeout('clean_end_grace', () => s.destroy(), CLEAN_END_GRACE_MS).unref();
  const done = () => {
    clearTimeout(timer);
    s.destroy();
  };
  s.once('finish', done)
    .once('error', done)
    .once('close', () => clearTimeout(timer));
  if (!s.writableEnded) s.end();
}
