import { DEFAULT_WINDOW_BYTES, Flag, FrameType, frame, frameHeader } from './frame.js';
import type { FrameWriter } from './frame-writer.js';
import type { H2Stream } from './h2-stream.js';

/** Largest DATA frame we send, whatever the peer allows: small enough to interleave streams. */
const MAX_DATA_FRAME_BYTES = 64 * 1024;
/**
 * A frame with one payload up to this size is copied into one buffer with its header:
 * cheaper than a second socket write (each corked write is an entry, each writev an array,
 * and Node's TLS copies a writev's buffers into one before encrypting anyway).
 */
const COPY_INTO_FRAME_BYTES = 4096;

/**
 * Frames the streams' queued writes as DATA (RFC 9113 §6.1) within the flow-control
 * windows (§6.9) and the socket's bound. A stream that cannot go on waits in `#blocked`,
 * oldest first, until a WINDOW_UPDATE, a SETTINGS change or the socket's room on the socket wakes it;
 * a stream that blocks again goes to the back, so streams sharing a full socket take turns.
 */
export class DataScheduler {
  /** Bytes the peer lets us send on the connection (its WINDOW_UPDATEs on stream 0). */
  sendWindow = DEFAULT_WINDOW_BYTES;
  /** DATA frames written: the peer's WINDOW_UPDATE budget grows with them (flood-limits.ts). */
  framesSent = 0;
  readonly #writer: FrameWriter;
  readonly #maxFrame: () => number;
  readonly #onLocalEnd: (stream: H2Stream) => void;
  readonly #blocked = new Set<H2Stream>();
  /** The stream being framed: a write callback may queue its next write at once (Writable does). */
  #flushing: H2Stream | undefined;

  constructor(writer: FrameWriter, opts: { maxFrame: () => number; onLocalEnd: (stream: H2Stream) => void }) {
    this.#writer = writer;
    this.#maxFrame = opts.maxFrame;
    this.#onLocalEnd = opts.onLocalEnd;
  }

  /** Frames the stream's queue as far as the windows and the socket allow, then its END_STREAM. */
  flush(stream: H2Stream): void {
    if (this.#flushing === stream) return;
    const outer = this.#flushing;
    this.#flushing = stream;
    try {
      while (stream.queue.length > 0) {
        if (this.#writer.full) {
          this.#block(stream, true);
          return;
        }
        const n = Math.min(stream.sendWindow, this.sendWindow, this.#maxFrame(), MAX_DATA_FRAME_BYTES);
        if (n <= 0) {
          this.#block(stream, false);
          return;
        }
        this.#sendFrame(stream, n);
        if (stream.destroyed) return;
      }
      this.#blocked.delete(stream);
      // END_STREAM takes no window (§6.9): an empty DATA frame carries it.
      if (stream.finalCallback !== undefined && !stream.localEnded) {
        this.#writer.write(frameHeader(0, FrameType.DATA, Flag.END_STREAM, stream.id));
        this.framesSent++;
        this.#endLocal(stream);
      }
    } finally {
      this.#flushing = outer;
    }
  }

  /** Windows opened or the socket has room again: blocked streams go on, oldest first. */
  wake = (): void => {
    for (const s of [...this.#blocked]) {
      if (this.#writer.waitingRoom) return;
      this.#blocked.delete(s);
      if (!s.destroyed) this.flush(s);
    }
  };

  forget(stream: H2Stream): void {
    this.#blocked.delete(stream);
  }

  clear(): void {
    this.#blocked.clear();
  }

  /** One DATA frame of up to `max` bytes from the head of the queue; END_STREAM on it if the queue ends. */
  #sendFrame(stream: H2Stream, max: number): void {
    const head = stream.queue[0]!;
    if (stream.queue.length === 1 && head.offset === 0 && head.chunks.length === 1) {
      const chunk = head.chunks[0]!;
      if (chunk.length <= max) {
        this.#sendWhole(stream, chunk, head.callback);
        return;
      }
    }
    const parts: Buffer[] = [];
    const done: ((error?: Error | null) => void)[] = [];
    let left = max;
    while (left > 0 && stream.queue.length > 0) {
      const w = stream.queue[0]!;
      const chunk = w.chunks[0]!;
      const take = Math.min(chunk.length - w.offset, left);
      parts.push(take === chunk.length ? chunk : chunk.subarray(w.offset, w.offset + take));
      w.offset += take;
      left -= take;
      if (w.offset < chunk.length) continue;
      w.chunks.shift();
      w.offset = 0;
      if (w.chunks.length === 0) {
        stream.queue.shift();
        done.push(w.callback);
      }
    }
    const bytes = max - left;
    const last = stream.queue.length === 0 && stream.finalCallback !== undefined;
    this.#writer.write(frameHeader(bytes, FrameType.DATA, last ? Flag.END_STREAM : 0, stream.id));
    this.framesSent++;
    for (const p of parts) this.#writer.write(p);
    stream.sendWindow -= bytes;
    this.sendWindow -= bytes;
    if (last) this.#endLocal(stream);
    for (const callback of done) callback();
  }

  /**
   * The usual case, the stream's one queued write fitting one frame (a request, a reply):
   * up to COPY_INTO_FRAME_BYTES the frame goes out as one buffer, header and payload, one
   * socket write instead of two and no part lists.
   */
  #sendWhole(stream: H2Stream, chunk: Buffer, callback: (error?: Error | null) => void): void {
    stream.queue.shift();
    const last = stream.finalCallback !== undefined;
    const flags = last ? Flag.END_STREAM : 0;
    this.framesSent++;
    if (chunk.length <= COPY_INTO_FRAME_BYTES)
      this.#writer.write(frame(FrameType.DATA, flags, stream.id, chunk));
    else {
      this.#writer.write(frameHeader(chunk.length, FrameType.DATA, flags, stream.id));
      this.#writer.write(chunk);
    }
    stream.sendWindow -= chunk.length;
    this.sendWindow -= chunk.length;
    if (last) this.#endLocal(stream);
    callback();
  }

  #endLocal(stream: H2Stream): void {
    stream.localEnded = true;
    const callback = stream.finalCallback;
    stream.finalCallback = undefined;
    callback?.();
    this.#onLocalEnd(stream);
  }

  #block(stream: H2Stream, onSocket: boolean): void {
    this.#blocked.add(stream);
    if (onSocket) this.#writer.onRoom(this.wake);
  }
}
