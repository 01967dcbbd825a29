import type { Duplex } from 'node:stream';
import { pumpBytes } from '@zmesh/shared';

export interface CopyResult {
  /** Bytes read from `downstream` and written to `upstream`. */
  sent: number;
  /** Bytes read from `upstream` and written to `downstream`. */
  received: number;
  error?: Error;
}

/**
 * Copies bytes both ways until both directions have ended or either side fails.
 * Back-pressure comes from `pumpBytes` (a full writer pauses its reader). Half-close is kept:
 * the end of one direction ends only the other side's writable (TCP FIN ↔ HTTP/2
 * END_STREAM), so a client that shuts down its write side still gets the full reply.
 * Sockets must be created with `allowHalfOpen: true` for that to hold.
 */
export function bidirectionalCopy(downstream: Duplex, upstream: Duplex): Promise<CopyResult> {
  return new Promise((resolve) => {
    const result: CopyResult = { sent: 0, received: 0 };
    const sent = pumpBytes(downstream, upstream);
    const received = pumpBytes(upstream, downstream);
    let openDirections = 2;
    let settled = false;

    const finish = (error?: Error): void => {
      if (settled) return;
      settled = true;
      result.sent = sent.bytes;
      result.received = received.bytes;
      if (error) {
        result.error = error;
        downstream.destroy();
        upstream.destroy();
      }
      resolve(result);
    };
    const directionDone = (): void => {
      openDirections -= 1;
      if (openDirections === 0) finish();
    };

    // A direction is done when its writer has flushed the end (not merely when the reader ended).
    upstream.on('finish', directionDone);
    downstream.on('finish', directionDone);
    downstream.on('error', finish);
    upstream.on('error', finish);
    // 'close' without both finishes: the peer reset or destroyed the stream.
    const onClose = (): void => {
      if (openDirections > 0)
        setImmediate(() =>
          finish(openDirections > 0 ? new Error('closed before both directions ended') : undefined),
        );
    };
    downstream.on('close', onClose);
    upstream.on('close', onClose);
    // A side destroyed before the copy began (a client that reset while its tunnel was being
    // set up) may have emitted its 'close' already: without this the other side, an
    // upstream connection, stayed open for good (found by `zmesh harness soak`).
    if (downstream.destroyed || upstream.destroyed) onClose();
  });
}
