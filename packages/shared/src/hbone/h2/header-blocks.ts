import { err, ok, type Result } from '../../result.js';
import { ErrorCode, Flag, FrameType, frame } from './frame.js';
import { type HeaderField, HpackDecoder } from './hpack.js';

/** A header block (HEADERS + CONTINUATION) larger than this ends the connection (CVE-2024-27316). */
const MAX_HEADER_BLOCK_BYTES = 64 * 1024;
/** The HPACK dynamic table the peer may use toward us: the default (RFC 7541 §4.2). */
const HEADER_TABLE_BYTES = 4096;

export interface HeaderBlock {
  streamId: number;
  /** The HEADERS frame's flags (END_STREAM matters). */
  flags: number;
  fields: HeaderField[];
  /** RFC 9113 §6.5.2 size of the decoded list. */
  listBytes: number;
  /** HEADERS with the PRIORITY flag naming its own stream: a stream error (RFC 9113 §5.3.1). */
  dependsOnItself: boolean;
}

/** A connection error: the code for GOAWAY and why. */
export interface ConnectionFault {
  code: number;
  reason: string;
}

/**
 * Puts header blocks together from HEADERS and CONTINUATION frames (RFC 9113 §6.2, §6.10)
 * and decodes them with the connection's one HPACK decoder. Every block is decoded, even
 * one whose stream is then refused: the HPACK table must stay in step with the peer's.
 */
export class HeaderBlocks {
  readonly #decoder = new HpackDecoder({ maxTableSize: HEADER_TABLE_BYTES });
  #pending:
    | { streamId: number; flags: number; parts: Buffer[]; bytes: number; dependsOnItself: boolean }
    | undefined;

  /** The stream whose block is incomplete: only its CONTINUATION may come next. */
  get pendingStream(): number | undefined {
    return this.#pending?.streamId;
  }

  /** A HEADERS frame: the block if END_HEADERS completes it, undefined while it waits for more. */
  headers(
    streamId: number,
    flags: number,
    payload: Buffer,
  ): Result<HeaderBlock | undefined, ConnectionFault> {
    let start = 0;
    let end = payload.length;
    if (flags & Flag.PADDED) {
      start = 1;
      end -= payload[0] ?? 0;
    }
    // Stream dependency and weight, ignored (§5.3.2), except a stream depending on itself (§5.3.1).
    let dependsOnItself = false;
    if (flags & Flag.PRIORITY) {
      dependsOnItself =
        start + 4 <= payload.length && (payload.readUInt32BE(start) & 0x7fffffff) === streamId;
      start += 5;
    }
    if (start > end)
      return err({ code: ErrorCode.PROTOCOL_ERROR, reason: 'HEADERS padding exceeds its payload' });
    const fragment = payload.subarray(start, end);
    if (flags & Flag.END_HEADERS) return this.#decode(streamId, flags, fragment, dependsOnItself);
    this.#pending = {
      streamId,
      flags,
      parts: [Buffer.from(fragment)],
      bytes: fragment.length,
      dependsOnItself,
    };
    return this.#bounded();
  }

  /** A CONTINUATION frame of the pending block (the caller checked that one is pending, on this stream). */
  continuation(flags: number, payload: Buffer): Result<HeaderBlock | undefined, ConnectionFault> {
    const pending = this.#pending!;
    pending.parts.push(Buffer.from(payload));
    pending.bytes += payload.length;
    const bounded = this.#bounded();
    if (!bounded.ok || !(flags & Flag.END_HEADERS)) return bounded;
    this.#pending = undefined;
    return this.#decode(
      pending.streamId,
      pending.flags,
      Buffer.concat(pending.parts),
      pending.dependsOnItself,
    );
  }

  #bounded(): Result<undefined, ConnectionFault> {
    if ((this.#pending?.bytes ?? 0) <= MAX_HEADER_BLOCK_BYTES) return ok(undefined);
    this.#pending = undefined;
    return err({
      code: ErrorCode.ENHANCE_YOUR_CALM,
      reason: `header block over ${MAX_HEADER_BLOCK_BYTES} bytes`,
    });
  }

  #decode(
    streamId: number,
    flags: number,
    block: Buffer,
    dependsOnItself: boolean,
  ): Result<HeaderBlock, ConnectionFault> {
    const decoded = this.#decoder.decode(block);
    if (!decoded.ok) return err({ code: ErrorCode.COMPRESSION_ERROR, reason: decoded.error });
    return ok({
      streamId,
      flags,
      fields: decoded.value.fields,
      listBytes: decoded.value.listBytes,
      dependsOnItself,
    });
  }
}

/**
 * The frames that carry an encoded header block (RFC 9113 §4.3): one HEADERS if it fits
 * the peer's SETTINGS_MAX_FRAME_SIZE, else HEADERS then CONTINUATIONs, END_HEADERS on the
 * last and END_STREAM (if asked) on the first.
 */
export function headerFrames(
  block: Buffer,
  streamId: number,
  endStream: boolean,
  maxFrame: number,
): Buffer[] {
  const endFlag = endStream ? Flag.END_STREAM : 0;
  if (block.length <= maxFrame)
    return [frame(FrameType.HEADERS, endFlag | Flag.END_HEADERS, streamId, block)];
  const frames: Buffer[] = [];
  for (let off = 0; off < block.length; off += maxFrame) {
    const type = off === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
    const flags = (off === 0 ? endFlag : 0) | (off + maxFrame >= block.length ? Flag.END_HEADERS : 0);
    frames.push(frame(type, flags, streamId, block.subarray(off, off + maxFrame)));
  }
  return frames;
}
