import type { Readable, Writable } from 'node:stream';

const KiB = 1024;

/**
 * Bytes a pump lets queue in its destination before it pauses the source. Above a
 * stream's own highWaterMark (16 KiB for an HTTP/2 stream, so every 64 KiB socket read
 * would otherwise pause and resume the socket: two epoll_ctl calls per chunk), below the
 * HTTP/2 stream window, so one tunnel holds at most this much per direction.
 */
export const PUMP_QUEUE_BYTES = 256 * KiB;

/**
 * Chunks at least this large are bulk transfer: they are held (corked) until the event
 * loop's check phase, so that the DATA frames one TLS read yields leave in one writev
 * instead of one write each. Smaller chunks (requests, replies) are written at once, or
 * join a cork already open. Well below 16 KiB: a 16 KiB DATA frame (plus its 9-byte
 * header) does not fit one 16 KiB TLS record, so an HTTP/2 stream delivers it cut at the
 * record boundaries, as a chunk just under 16 KiB and a few bytes. With a 16 KiB threshold
 * no bulk chunk was ever held, and the receiving proxy wrote ~8 KiB per system call.
 */
export const PUMP_COALESCE_MIN_BYTES = 4 * KiB;

/**
 * Write coalescing for one destination: called with each chunk's size before it is
 * written, it corks `dst` at the first bulk chunk (see PUMP_COALESCE_MIN_BYTES) and
 * uncorks it in the check phase, so that the loop turn's writes leave together.
 */
export function bulkCoalescer(dst: Writable): (bytes: number) => void {
  let corked = false;
  const flush = () => {
    corked = false;
    if (!dst.destroyed) dst.uncork();
  };
  return (bytes) => {
    if (corked || bytes < PUMP_COALESCE_MIN_BYTES) return;
    corked = true;
    dst.cork();
    setImmediate(flush);
  };
}

export interface PumpCounter {
  /** Bytes read from the source (and handed to the destination). */
  bytes: number;
}

/**
 * Copies `src` into `dst` like `src.pipe(dst)` (the source's end ends the destination),
 * with a larger queue bound and write coalescing for bulk data. Errors and closes are the
 * caller's to handle: the pump only stops writing once the destination is destroyed.
 */
export function pumpBytes(src: Readable, dst: Writable): PumpCounter {
  const counter: PumpCounter = { bytes: 0 };
  const coalesce = bulkCoalescer(dst);
  let waiting = false;
  const resume = () => {
    waiting = false;
    src.resume();
  };
  src.on('data', (chunk: Buffer) => {
    counter.bytes += chunk.length;
    if (dst.destroyed || dst.writableEnded) return;
    coalesce(chunk.length);
    dst.write(chunk);
    // 'drain' is due: a queue above the bound means a write has returned false.
    if (dst.writableLength > PUMP_QUEUE_BYTES && !waiting) {
      waiting = true;
      src.pause();
      dst.once('drain', resume);
    }
  });
  // 'end' is emitted once; on() spares once()'s wrapper on every pumped connection.
  src.on('end', () => {
    if (!dst.destroyed && !dst.writableEnded) dst.end();
  });
  // A 'data' listener does not undo an earlier explicit pause() (a stream held while its
  // protocol was sniffed, or while its tunnel was set up): the pump starts the flow itself.
  if (!waiting) src.resume();
  return counter;
}
