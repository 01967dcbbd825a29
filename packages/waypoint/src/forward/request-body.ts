import type { Readable, Writable } from 'node:stream';

/**
 * Envoy's per-request buffer for retries: the body is streamed to the current attempt and
 * kept (up to this many bytes) so that a retry can replay it. A longer body is streamed
 * once and the request is not retried.
 */
const MAX_REPLAY_BYTES = 1024 * 1024;

/** A request body that one attempt at a time consumes, replayable while it fits the buffer. */
export class RequestBody {
  #chunks: Buffer[] = [];
  #bytes = 0;
  #ended = false;
  #overflow = false;
  #sink: Writable | undefined;
  #attached = 0;

  constructor(
    private readonly source: Readable,
    private readonly limit = MAX_REPLAY_BYTES,
  ) {
    source.on('data', (c: Buffer) => this.#onData(c));
    source.once('end', () => {
      this.#ended = true;
      this.#sink?.end();
    });
  }

  /** True while a new attempt can be given the whole body. */
  get replayable(): boolean {
    return this.#attached === 0 || !this.#overflow;
  }

  /** Streams the body (what was kept, then the rest as it arrives) into `sink`. */
  attach(sink: Writable): void {
    this.#attached++;
    this.#sink = sink;
    for (const c of this.#chunks) sink.write(c);
    if (this.#overflow) this.#chunks = [];
    if (this.#ended) sink.end();
    else this.source.resume();
  }

  detach(sink: Writable): void {
    if (this.#sink === sink) this.#sink = undefined;
  }

  #onData(c: Buffer): void {
    if (!this.#overflow) {
      this.#chunks.push(c);
      this.#bytes += c.length;
      if (this.#bytes > this.limit) {
        this.#overflow = true;
        if (this.#sink) this.#chunks = [];
      }
    }
    const sink = this.#sink;
    if (sink) {
      if (!sink.write(c)) {
        this.source.pause();
        sink.once('drain', () => this.source.resume());
      }
    } else if (this.#overflow || this.#bytes > this.limit) {
      // Nobody to hand bytes to and the buffer is full: let TCP/HTTP2 flow control push back.
      this.source.pause();
    }
  }
}
