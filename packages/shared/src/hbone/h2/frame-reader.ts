import { ErrorCode, Flag, FRAME_HEADER_BYTES, FrameType, PREFACE } from './frame.js';

/** What a FrameReader hands on; see FrameReader. */
export interface FrameSink {
  /** A whole frame other than DATA; `payload` is only valid until the call returns. */
  onFrame(type: number, flags: number, streamId: number, payload: Buffer): void;
  /** A DATA frame begins: `length` is its whole payload, padding included (flow control counts it). */
  onDataStart(streamId: number, flags: number, length: number): void;
  /** Data of the current DATA frame, padding removed; a view into the socket's chunk. */
  onData(streamId: number, chunk: Buffer): void;
  /** The current DATA frame is complete; END_STREAM (in its flags) takes effect now. */
  onDataEnd(streamId: number, flags: number): void;
  /** A framing error: always a connection error (RFC 9113 §4.2, §5.4.1). */
  onFramingError(code: number, reason: string): void;
}

enum State {
  Preface,
  Header,
  Payload,
  PadLength,
  Data,
  Padding,
  Failed,
}

/**
 * Cuts a byte stream into HTTP/2 frames (RFC 9113 §4.1). DATA payloads are streamed as
 * views into the chunks they arrived in, never copied or held back for the whole frame:
 * a 1 MiB DATA frame costs no 1 MiB buffer. Other frames are whole before they are
 * handed on, bounded by the largest frame we accept (SETTINGS_MAX_FRAME_SIZE).
 */
export class FrameReader {
  readonly #sink: FrameSink;
  #maxFrameBytes: number;
  #state: State;
  #prefaceSeen = 0;
  readonly #head = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
  #headSeen = 0;
  #type = 0;
  #flags = 0;
  #streamId = 0;
  /** Payload bytes of the current frame not yet read (padding included). */
  #left = 0;
  #padding = 0;
  #parts: Buffer[] = [];

  constructor(sink: FrameSink, opts: { maxFrameBytes: number; expectPreface: boolean }) {
    this.#sink = sink;
    this.#maxFrameBytes = opts.maxFrameBytes;
    this.#state = opts.expectPreface ? State.Preface : State.Header;
  }

  /** Frames larger than this are a FRAME_SIZE_ERROR (our SETTINGS_MAX_FRAME_SIZE). */
  set maxFrameBytes(n: number) {
    this.#maxFrameBytes = n;
  }

  push(chunk: Buffer): void {
    let off = 0;
    while (off < chunk.length && this.#state !== State.Failed) {
      switch (this.#state) {
        case State.Preface:
          off = this.#readPreface(chunk, off);
          break;
        case State.Header:
          off = this.#readHeader(chunk, off);
          break;
        case State.Payload:
          off = this.#readPayload(chunk, off);
          break;
        case State.PadLength:
          off = this.#readPadLength(chunk, off);
          break;
        case State.Data:
          off = this.#readData(chunk, off);
          break;
        case State.Padding: {
          const n = Math.min(this.#left, chunk.length - off);
          off += n;
          this.#left -= n;
          if (this.#left === 0) this.#endData();
          break;
        }
      }
    }
  }

  #readPreface(chunk: Buffer, off: number): number {
    while (off < chunk.length && this.#prefaceSeen < PREFACE.length) {
      if (chunk[off] !== PREFACE[this.#prefaceSeen]) {
        this.#fail(ErrorCode.PROTOCOL_ERROR, 'bad connection preface');
        return chunk.length;
      }
      off++;
      this.#prefaceSeen++;
    }
    if (this.#prefaceSeen === PREFACE.length) this.#state = State.Header;
    return off;
  }

  #readHeader(chunk: Buffer, off: number): number {
    if (this.#headSeen === 0 && chunk.length - off >= FRAME_HEADER_BYTES) {
      return this.#startFrame(chunk, off) ? off + FRAME_HEADER_BYTES : chunk.length;
    }
    // A header cut between two socket reads is put together in #head.
    const n = Math.min(FRAME_HEADER_BYTES - this.#headSeen, chunk.length - off);
    chunk.copy(this.#head, this.#headSeen, off, off + n);
    this.#headSeen += n;
    if (this.#headSeen < FRAME_HEADER_BYTES) return off + n;
    this.#headSeen = 0;
    return this.#startFrame(this.#head, 0) ? off + n : chunk.length;
  }

  /** Reads the 9-byte header at h[at]; false once the reader has failed. */
  #startFrame(h: Buffer, at: number): boolean {
    const length = (h[at]! << 16) | (h[at + 1]! << 8) | h[at + 2]!;
    this.#type = h[at + 3]!;
    this.#flags = h[at + 4]!;
    this.#streamId = h.readUInt32BE(at + 5) & 0x7fff_ffff; // the reserved bit is ignored (§4.1)
    if (length > this.#maxFrameBytes) {
      this.#fail(ErrorCode.FRAME_SIZE_ERROR, `frame of ${length} bytes over ${this.#maxFrameBytes}`);
      return false;
    }
    this.#left = length;
    if (this.#type !== FrameType.DATA) {
      this.#state = State.Payload;
      if (length === 0) this.#deliver(EMPTY);
      return (this.#state as State) !== State.Failed;
    }
    this.#sink.onDataStart(this.#streamId, this.#flags, length);
    if ((this.#state as State) === State.Failed) return false;
    this.#padding = 0;
    if (this.#flags & Flag.PADDED) this.#state = length === 0 ? this.#failPad() : State.PadLength;
    else if (length === 0) this.#endData();
    else this.#state = State.Data;
    return (this.#state as State) !== State.Failed;
  }

  #readPayload(chunk: Buffer, off: number): number {
    const n = Math.min(this.#left, chunk.length - off);
    const part = chunk.subarray(off, off + n);
    this.#left -= n;
    if (this.#left > 0) {
      this.#parts.push(part);
      return off + n;
    }
    const payload = this.#parts.length === 0 ? part : Buffer.concat([...this.#parts, part]);
    this.#parts = [];
    this.#deliver(payload);
    return off + n;
  }

  #deliver(payload: Buffer): void {
    this.#state = State.Header;
    this.#sink.onFrame(this.#type, this.#flags, this.#streamId, payload);
  }

  #readPadLength(chunk: Buffer, off: number): number {
    this.#padding = chunk[off]!;
    this.#left -= 1;
    // RFC 9113 §6.1: padding as long as the payload or longer is a PROTOCOL_ERROR.
    if (this.#padding > this.#left) {
      this.#fail(ErrorCode.PROTOCOL_ERROR, 'DATA padding exceeds its payload');
      return chunk.length;
    }
    this.#state = this.#left === this.#padding ? State.Padding : State.Data;
    if (this.#left === 0) this.#endData();
    return off + 1;
  }

  #readData(chunk: Buffer, off: number): number {
    const data = this.#left - this.#padding;
    const n = Math.min(data, chunk.length - off);
    const view = n === chunk.length && off === 0 ? chunk : chunk.subarray(off, off + n);
    this.#left -= n;
    this.#sink.onData(this.#streamId, view);
    if (this.#state === State.Failed) return chunk.length;
    if (this.#left === 0) this.#endData();
    else if (this.#left === this.#padding) this.#state = State.Padding;
    return off + n;
  }

  #endData(): void {
    this.#state = State.Header;
    this.#sink.onDataEnd(this.#streamId, this.#flags);
  }

  #failPad(): State {
    this.#fail(ErrorCode.FRAME_SIZE_ERROR, 'padded DATA frame without a pad length');
    return State.Failed;
  }

  /** Stops reading: whatever follows a framing error cannot be trusted to be a frame. */
  #fail(code: number, reason: string): void {
    this.#state = State.Failed;
    this.#parts = [];
    this.#sink.onFramingError(code, reason);
  }

  /** After the connection decided to stop (a protocol error found above framing). */
  stop(): void {
    this.#state = State.Failed;
    this.#parts = [];
  }
}

const EMPTY = Buffer.alloc(0);
