import { err, ok, type Result } from '../../result.js';
import {
  DEFAULT_MAX_FRAME_BYTES,
  DEFAULT_WINDOW_BYTES,
  ErrorCode,
  MAX_FRAME_SIZE_LIMIT,
  MAX_WINDOW_BYTES,
  Setting,
} from './frame.js';
import type { ConnectionFault } from './header-blocks.js';

/** The peer's SETTINGS as we apply them (RFC 9113 §6.5.2 defaults until it sends its own). */
export interface H2PeerSettings {
  maxConcurrentStreams: number;
  initialWindowSize: number;
  maxFrameSize: number;
  maxHeaderListSize: number;
}

export function defaultPeerSettings(): H2PeerSettings {
  return {
    maxConcurrentStreams: Number.POSITIVE_INFINITY,
    initialWindowSize: DEFAULT_WINDOW_BYTES,
    maxFrameSize: DEFAULT_MAX_FRAME_BYTES,
    maxHeaderListSize: Number.POSITIVE_INFINITY,
  };
}

/**
 * Reads a SETTINGS payload into `peer`, validating every entry first so that a bad frame
 * changes nothing (it ends the connection anyway). Returns how much the initial stream
 * window moved: RFC 9113 §6.9.2 applies that to every open stream's send window.
 * Unknown identifiers are ignored (§6.5.2); so is HEADER_TABLE_SIZE, since our HPACK
 * encoder never uses the dynamic table.
 */
export function applyPeerSettings(peer: H2PeerSettings, payload: Buffer): Result<number, ConnectionFault> {
  if (payload.length % 6 !== 0)
    return err({ code: ErrorCode.FRAME_SIZE_ERROR, reason: 'SETTINGS not 6-byte entries' });
  const next = { ...peer };
  for (let off = 0; off < payload.length; off += 6) {
    const id = payload.readUInt16BE(off);
    const value = payload.readUInt32BE(off + 2);
    switch (id) {
      case Setting.ENABLE_PUSH:
        if (value > 1) return err({ code: ErrorCode.PROTOCOL_ERROR, reason: `ENABLE_PUSH ${value}` });
        break;
      case Setting.MAX_CONCURRENT_STREAMS:
        next.maxConcurrentStreams = value;
        break;
      case Setting.INITIAL_WINDOW_SIZE:
        if (value > MAX_WINDOW_BYTES) {
          return err({ code: ErrorCode.FLOW_CONTROL_ERROR, reason: `initial window ${value} above 2^31-1` });
        }
        next.initialWindowSize = value;
        break;
      case Setting.MAX_FRAME_SIZE:
        if (value < DEFAULT_MAX_FRAME_BYTES || value > MAX_FRAME_SIZE_LIMIT) {
          return err({ code: ErrorCode.PROTOCOL_ERROR, reason: `MAX_FRAME_SIZE ${value}` });
        }
        next.maxFrameSize = value;
        break;
      case Setting.MAX_HEADER_LIST_SIZE:
        next.maxHeaderListSize = value;
        break;
    }
  }
  const delta = next.initialWindowSize - peer.initialWindowSize;
  Object.assign(peer, next);
  return ok(delta);
}
