import type { Duplex } from 'node:stream';
import { pumpBytes } from '../net/byte-pump.js';
import { ErrorCode } from './h2/frame.js';

/**
 * An HTTP/2 stream as the splice and the tenancy copy see it: a Duplex that can be reset
 * with a code and tells which code closed it (H2Stream; node:http2's streams fit too).
 */
export type ResettableStream = Duplex & {
  readonly rstCode: number | undefined;
  close(code: number): void;
};

export function isResettableStream(s: Duplex): s is ResettableStream {
  return 'rstCode' in s && typeof (s as ResettableStream).close === 'function';
}

export interface SpliceStats {
  /** Bytes read from the HTTP/2 stream and written upstream. */
  toUpstream: number;
  /** Bytes read from upstream and written to the HTTP/2 stream. */
  fromUpstream: number;
}

/**
 * Copies both ways with back-pressure (the pump pauses the source when the sink is full)
 * and keeps the half-closes apart: END_STREAM from the peer ends upstream's writable
 * side, upstream's end sends END_STREAM. An abrupt end on either side is propagated as
 * abrupt: upstream error → RST_STREAM(CONNECT_ERROR) (RFC 9113 §8.5), stream reset →
 * TCP RST upstream when the socket supports it.
 */
export function spliceTunnel(
  h2: ResettableStream,
  upstream: Duplex,
  onClose?: (stats: SpliceStats) => void,
): void {
  const toUpstream = pumpBytes(h2, upstream);
  const fromUpstream = pumpBytes(upstream, h2);
  let done = false;
  const finish = () => {
    if (done) return;
    done = true;
    onClose?.({ toUpstream: toUpstream.bytes, fromUpstream: fromUpstream.bytes });
  };
  upstream.on('error', () => {
    resetStream(h2, ErrorCode.CONNECT_ERROR);
  });
  upstream.on('close', () => {
    if (!upstream.readableEnded) resetStream(h2, ErrorCode.CONNECT_ERROR);
    if (h2.destroyed) finish();
  });
  h2.on('error', () => abort(upstream));
  h2.on('close', () => {
    if (h2.rstCode !== undefined && h2.rstCode !== ErrorCode.NO_ERROR) abort(upstream);
    else if (!h2.readableEnded) abort(upstream);
    if (upstream.destroyed) finish();
  });
}

export function resetStream(h2: ResettableStream, code: number): void {
  if (h2.destroyed || h2.closed) return;
  h2.close(code);
}

function abort(upstream: Duplex): void {
  if (upstream.destroyed) return;
  const socket = upstream as Duplex & { resetAndDestroy?: () => void };
  if (typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy();
  else upstream.destroy();
}
