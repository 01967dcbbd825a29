/** HTTP/2 framing (RFC 9113 §4, §6): the numbers and the frame builders HBONE needs. */

export const FRAME_HEADER_BYTES = 9;
/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

/** Error codes (RFC 9113 §7); the same numbers as `http2.constants.NGHTTP2_*`. */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

/** SETTINGS identifiers (RFC 9113 §6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** The defaults a peer assumes until our SETTINGS arrive (RFC 9113 §6.5.2). */
export const DEFAULT_WINDOW_BYTES = 65_535;
export const DEFAULT_MAX_FRAME_BYTES = 16_384;
/** Largest SETTINGS_MAX_FRAME_SIZE a peer may announce, and largest window (2^31-1). */
export const MAX_FRAME_SIZE_LIMIT = 0xff_ffff;
export const MAX_WINDOW_BYTES = 0x7fff_ffff;

export function frameHeader(length: number, type: number, flags: number, streamId: number): Buffer {
  return writeHeader(Buffer.allocUnsafe(FRAME_HEADER_BYTES), length, type, flags, streamId);
}

/** A whole frame in one buffer; for control frames and header blocks (DATA is written in parts). */
export function frame(type: number, flags: number, streamId: number, payload?: Buffer): Buffer {
  const length = payload?.length ?? 0;
  const out = writeHeader(Buffer.allocUnsafe(FRAME_HEADER_BYTES + length), length, type, flags, streamId);
  if (payload) payload.copy(out, FRAME_HEADER_BYTES);
  return out;
}

/** RFC 9113 §4.1: 24-bit length, type, flags, 31-bit stream id, at the start of `out`. */
function writeHeader(out: Buffer, length: number, type: number, flags: number, streamId: number): Buffer {
  out[0] = length >>> 16;
  out[1] = (length >>> 8) & 0xff;
  out[2] = length & 0xff;
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(streamId & MAX_WINDOW_BYTES, 5);
  return out;
}

export function settingsFrame(values: ReadonlyMap<number, number>): Buffer {
  const payload = Buffer.allocUnsafe(6 * values.size);
  let off = 0;
  for (const [id, value] of values) {
    payload.writeUInt16BE(id, off);
    payload.writeUInt32BE(value, off + 2);
    off += 6;
  }
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

export const SETTINGS_ACK = frame(FrameType.SETTINGS, Flag.ACK, 0);

function u32Frame(type: number, streamId: number, value: number): Buffer {
  const out = frame(type, 0, streamId, Buffer.alloc(4));
  out.writeUInt32BE(value >>> 0, FRAME_HEADER_BYTES);
  return out;
}

export function windowUpdateFrame(streamId: number, increment: number): Buffer {
  return u32Frame(FrameType.WINDOW_UPDATE, streamId, increment);
}

export function rstStreamFrame(streamId: number, code: number): Buffer {
  return u32Frame(FrameType.RST_STREAM, streamId, code);
}

export function goawayFrame(lastStreamId: number, code: number, debug?: Buffer): Buffer {
  const payload = Buffer.alloc(8 + (debug?.length ?? 0));
  payload.writeUInt32BE(lastStreamId & MAX_WINDOW_BYTES, 0);
  payload.writeUInt32BE(code >>> 0, 4);
  debug?.copy(payload, 8);
  return frame(FrameType.GOAWAY, 0, 0, payload);
}

export function pingFrame(payload: Buffer, ack: boolean): Buffer {
  return frame(FrameType.PING, ack ? Flag.ACK : 0, 0, payload);
}
