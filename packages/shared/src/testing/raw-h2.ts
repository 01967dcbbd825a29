import * as tls from 'node:tls';

/**
 * A hand-rolled HTTP/2 client for hostile-input tests: it writes frames exactly as told
 * (HEADERS immediately followed by RST_STREAM, oversized header blocks), which Node's own
 * client smooths over. RFC 9113 §4.1 framing, RFC 7541 literal header encoding only.
 */
export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

export const FRAME = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
};
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const END_STREAM = 0x1;
const END_HEADERS = 0x4;
const ACK = 0x1;

export class RawH2 {
  readonly frames: Frame[] = [];
  readonly closed: Promise<void>;
  readonly #socket: tls.TLSSocket;
  #buffer = Buffer.alloc(0);
  #waiters: (() => void)[] = [];

  private constructor(socket: tls.TLSSocket) {
    this.#socket = socket;
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', () => {});
    this.closed = new Promise((resolve) => socket.once('close', () => resolve()));
    this.closed.then(() => this.#wake());
  }

  static async connect(options: tls.ConnectionOptions): Promise<RawH2> {
    const socket = tls.connect({ ...options, ALPNProtocols: ['h2'] });
    await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
    const raw = new RawH2(socket);
    socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0, Buffer.alloc(0))]));
    await raw.waitFor((f) => f.type === FRAME.SETTINGS && (f.flags & ACK) === 0);
    return raw;
  }

  get destroyed(): boolean {
    return this.#socket.destroyed;
  }

  /** Returns false when the socket can no longer be written. */
  headers(
    streamId: number,
    fields: [string, string][],
    opts: { endStream?: boolean; chunk?: number } = {},
  ): boolean {
    const block = headerBlock(fields);
    const chunk = opts.chunk ?? 16_384;
    const parts: Buffer[] = [];
    for (let off = 0; off < block.length || off === 0; off += chunk) {
      const first = off === 0;
      const last = off + chunk >= block.length;
      const type = first ? FRAME.HEADERS : FRAME.CONTINUATION;
      const flags = (last ? END_HEADERS : 0) | (first && opts.endStream ? END_STREAM : 0);
      parts.push(frame(type, flags, streamId, block.subarray(off, off + chunk)));
    }
    return this.write(Buffer.concat(parts));
  }

  rst(streamId: number, code: number): boolean {
    const payload = Buffer.alloc(4);
    payload.writeUInt32BE(code);
    return this.write(frame(FRAME.RST_STREAM, 0, streamId, payload));
  }

  write(data: Buffer): boolean {
    if (this.#socket.destroyed || !this.#socket.writable) return false;
    this.#socket.write(data);
    return true;
  }

  /** Resolves with the first frame matching, or undefined if the connection closes or time runs out. */
  async waitFor(match: (f: Frame) => boolean, timeoutMs = 2000): Promise<Frame | undefined> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.frames.find(match);
      if (found || this.#socket.destroyed || Date.now() > deadline) return found;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  destroy(): void {
    this.#socket.destroy();
  }

  #onData(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    while (this.#buffer.length >= 9) {
      const length = this.#buffer.readUIntBE(0, 3);
      if (this.#buffer.length < 9 + length) break;
      const f: Frame = {
        type: this.#buffer[3]!,
        flags: this.#buffer[4]!,
        streamId: this.#buffer.readUInt32BE(5) & 0x7fffffff,
        payload: this.#buffer.subarray(9, 9 + length),
      };
      this.#buffer = this.#buffer.subarray(9 + length);
      if (f.type === FRAME.SETTINGS && (f.flags & ACK) === 0)
        this.write(frame(FRAME.SETTINGS, ACK, 0, Buffer.alloc(0)));
      this.frames.push(f);
    }
    this.#wake();
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }
}

export function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** An HPACK block of literal fields, no indexing or Huffman: what the raw client sends. */
export function headerBlock(fields: [string, string][]): Buffer {
  return Buffer.concat(fields.map(([n, v]) => literal(n, v)));
}

/** RFC 7541 §6.2.2 literal header field without indexing, new name, no Huffman. */
function literal(name: string, value: string): Buffer {
  return Buffer.concat([Buffer.from([0]), hpackString(name), hpackString(value)]);
}

function hpackString(text: string): Buffer {
  const bytes = Buffer.from(text);
  return Buffer.concat([hpackInt(bytes.length, 7), bytes]);
}

/** RFC 7541 §5.1 integer with an N-bit prefix (the high bits of the first octet left 0). */
function hpackInt(value: number, prefixBits: number): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([value]);
  const out = [max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return Buffer.from(out);
}

export function goawayCode(f: Frame): number {
  return f.payload.readUInt32BE(4);
}
