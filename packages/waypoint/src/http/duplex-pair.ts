import { Duplex } from 'node:stream';

/**
 * Two connected in-memory Duplex ends (what stream.duplexPair gives on Node ≥ 22.6):
 * bytes written to one are read from the other, with back-pressure (a write completes
 * when the reader has room) and half-close (end() on one ends the other's readable).
 */
export function duplexPair(): [Duplex, Duplex] {
  const a = new PairEnd();
  const b = new PairEnd();
  a.peer = b;
  b.peer = a;
  return [a, b];
}

class PairEnd extends Duplex {
  peer!: PairEnd;
  #waiting: (() => void) | undefined;

  constructor() {
    super({ allowHalfOpen: true });
  }

  override _read(): void {
    const cb = this.peer.#waiting;
    this.peer.#waiting = undefined;
    cb?.();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (error?: Error | null) => void): void {
    if (this.peer.destroyed) cb(new Error('peer closed'));
    else if (this.peer.push(chunk)) cb();
    else this.#waiting = cb;
  }

  override _final(cb: (error?: Error | null) => void): void {
    if (!this.peer.destroyed) this.peer.push(null);
    cb();
  }

  override _destroy(error: Error | null, cb: (error?: Error | null) => void): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.();
    if (!this.peer.destroyed) this.peer.destroy();
    cb(error);
  }
}
