import { Duplex } from 'node:stream';
import { ErrorCode } from './frame.js';

/** Received header fields: a name seen twice holds every value (RFC 9110 §5.3). */
export type H2Headers = Record<string, string | string[]>;
export type H2OutgoingHeaders = Record<string, string | number | readonly string[] | undefined>;

/**
 * What a stream needs from its connection; the connection is the only implementation
 * (an interface so that the stream file does not import the connection's).
 */
export interface StreamHost {
  /** The stream has data (or its end) to send, or its windows may have opened. */
  flushStream(stream: H2Stream): void;
  /** The stream's reader took bytes: the connection may grant the peer more window. */
  streamRead(stream: H2Stream): void;
  /** Sends RST_STREAM(code) and forgets the stream. */
  resetStream(stream: H2Stream, code: number): void;
  /** HEADERS for a response (server side). */
  respond(stream: H2Stream, headers: H2OutgoingHeaders, endStream: boolean): void;
  /** The stream is destroyed: drop it, resetting it if it is still open. */
  streamDestroyed(stream: H2Stream, error: Error | null): void;
}

/** One queued write: the chunks of a write()/writev() and the callback released when all are framed. */
export interface PendingWrite {
  chunks: Buffer[];
  /** Bytes of chunks[0] already sent. */
  offset: number;
  callback: (error?: Error | null) => void;
}

/** Bytes a stream's reader may hold before read() asks for more (the HTTP/2 window bounds the rest). */
const READ_HIGH_WATER_BYTES = 64 * 1024;
/**
 * Bytes of writes a stream holds before write() returns false: node:http2's 16 KiB. The
 * pumps keep their own, larger bound (PUMP_QUEUE_BYTES); a plain writer stops here.
 */
const WRITE_HIGH_WATER_BYTES = 16 * 1024;

/**
 * An HTTP/2 stream as a Duplex: write to send DATA, end() sends END_STREAM, 'end' is the
 * peer's END_STREAM. The connection drives it: flow control, framing and state live in
 * `H2Connection`; the stream only holds its queue, its windows and its half-close flags.
 *
 * Events besides Duplex's: 'response' (headers) on a client stream when the final response
 * arrives; 'aborted' when the stream was reset, or its connection lost, before its end was read.
 * `rstCode` is the RST_STREAM code that closed it (ours or the peer's), if one did.
 */
export class H2Stream extends Duplex {
  readonly id: number;
  readonly session: {
    readonly socket:
      | { readonly remoteAddress?: string | undefined; readonly remotePort?: number | undefined }
      | undefined;
  };
  rstCode: number | undefined = undefined;
  headersSent: boolean;
  /** Bytes we may still send (the peer's window for us); may go negative after a SETTINGS change. */
  sendWindow: number;
  /** Bytes the peer may still send us before a WINDOW_UPDATE. */
  recvWindow: number;
  /** Our END_STREAM was sent. */
  localEnded = false;
  /** The peer's END_STREAM arrived. */
  remoteEnded = false;
  /** The client got its final response HEADERS. */
  responded = false;
  /** When the stream was opened (Date.now()): a reset within PREMATURE_RESET_LIFETIME_MS of it may be premature. */
  readonly openedAt = Date.now();
  readonly queue: PendingWrite[] = [];
  /** end() was called: END_STREAM goes after the queue. */
  finalCallback: ((error?: Error | null) => void) | undefined = undefined;
  readonly #host: StreamHost;
  #idleMs = 0;
  #idleTimer: NodeJS.Timeout | undefined;
  #lastActive = 0;

  constructor(
    host: StreamHost & {
      readonly socket:
        | { readonly remoteAddress?: string | undefined; readonly remotePort?: number | undefined }
        | undefined;
    },
    id: number,
    windows: { send: number; recv: number },
    headersSent: boolean,
  ) {
    super({
      allowHalfOpen: true,
      readableHighWaterMark: READ_HIGH_WATER_BYTES,
      writableHighWaterMark: WRITE_HIGH_WATER_BYTES,
    });
    this.#host = host;
    this.session = host;
    this.id = id;
    this.sendWindow = windows.send;
    this.recvWindow = windows.recv;
    this.headersSent = headersSent;
  }

  /** Both ends have closed (END_STREAM both ways, or a reset). */
  get protocolClosed(): boolean {
    return this.rstCode !== undefined || (this.localEnded && this.remoteEnded);
  }

  /** Server side: sends the response HEADERS; with `endStream` the stream is done writing. */
  respond(headers: H2OutgoingHeaders, opts: { endStream?: boolean } = {}): void {
    if (this.headersSent || this.destroyed || this.rstCode !== undefined) return;
    this.headersSent = true;
    const endStream = opts.endStream === true;
    this.#host.respond(this, headers, endStream);
    if (endStream) {
      this.localEnded = true;
      // Nothing more may be written; a pending end() has nothing left to send.
      this.end();
    } else {
      this.#host.flushStream(this);
    }
  }

  /** Resets the stream with `code` (RFC 9113 §6.4); a no-op once it is closed. */
  close(code: number = ErrorCode.NO_ERROR, callback?: () => void): void {
    if (!this.protocolClosed && !this.destroyed) this.#host.resetStream(this, code);
    if (!this.destroyed) this.destroy();
    if (callback) this.once('close', callback);
  }

  /**
   * Emits 'timeout' after `ms` without bytes either way, as a socket does (0 turns it
   * off): node:http's agent calls it on a kept-alive upstream that runs over a tunnel.
   */
  setTimeout(ms: number, callback?: () => void): this {
    // As net.Socket: with 0 the callback given is removed, otherwise added once.
    if (callback && ms === 0) this.removeListener('timeout', callback);
    else if (callback) this.once('timeout', callback);
    this.#idleMs = ms;
    clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
    if (ms > 0 && !this.destroyed) {
      this.#lastActive = performance.now();
      this.#idleTimer = setTimeout(this.#onIdleTimer, ms).unref();
    }
    return this;
  }

  readonly #onIdleTimer = () => {
    const idle = performance.now() - this.#lastActive;
    if (idle + 1 >= this.#idleMs) {
      this.#idleTimer = undefined;
      this.emit('timeout');
    } else {
      this.#idleTimer = setTimeout(this.#onIdleTimer, this.#idleMs - idle).unref();
    }
  };

  /**
   * Bytes leave the read buffer here (flowing mode included: Readable's flow() calls it),
   * which is when the peer may be granted more window. _read() is no place for that: it
   * runs before the bytes it makes room for are taken, and not again until the next push.
   */
  override read(size?: number): Buffer | null {
    const chunk = super.read(size) as Buffer | null;
    if (chunk !== null) this.#host.streamRead(this);
    return chunk;
  }

  override _read(): void {
    this.#host.streamRead(this);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#enqueue([chunk], callback);
  }

  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    callback: (error?: Error | null) => void,
  ): void {
    this.#enqueue(
      chunks.map((c) => c.chunk),
      callback,
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (this.localEnded) {
      callback();
      return;
    }
    this.finalCallback = callback;
    this.#host.flushStream(this);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    clearTimeout(this.#idleTimer);
    this.#host.streamDestroyed(this, error);
    const gone = new Error('stream destroyed');
    for (const w of this.queue.splice(0)) w.callback(gone);
    this.finalCallback = undefined;
    callback(error);
  }

  #enqueue(chunks: Buffer[], callback: (error?: Error | null) => void): void {
    if (this.localEnded || this.rstCode !== undefined) {
      callback(new Error(`write after the stream closed (rst ${this.rstCode ?? 'none'})`));
      return;
    }
    if (this.#idleMs > 0) this.#lastActive = performance.now();
    // An empty write would go out as an empty DATA frame, which peers (and we) count as a flood.
    chunks = chunks.filter((c) => c.length > 0);
    if (chunks.length === 0) {
      callback();
      return;
    }
    this.queue.push({ chunks, offset: 0, callback });
    this.#host.flushStream(this);
  }

  /** Called by the connection: DATA payload for the reader. */
  receiveData(chunk: Buffer): void {
    if (this.#idleMs > 0) this.#lastActive = performance.now();
    this.push(chunk);
  }

  /** Called by the connection: the peer's END_STREAM. */
  receiveEnd(): void {
    this.remoteEnded = true;
    this.push(null);
  }

  /**
   * Called by the connection when a reset (the peer's, or the connection's end) closes the
   * stream: the reader learns it was cut short, then the stream is destroyed.
   */
  receiveReset(code: number): void {
    if (this.rstCode === undefined) this.rstCode = code;
    if (!this.remoteEnded) this.emit('aborted');
    this.destroy();
  }
}
