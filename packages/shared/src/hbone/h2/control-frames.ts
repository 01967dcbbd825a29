import type { DataScheduler } from './data-scheduler.js';
import type { FloodBreach, FloodCounters } from './flood-limits.js';
import {
  ErrorCode,
  Flag,
  FrameType,
  MAX_WINDOW_BYTES,
  pingFrame,
  SETTINGS_ACK,
  settingsFrame,
} from './frame.js';
import type { H2Stream } from './h2-stream.js';
import { applyPeerSettings, type H2PeerSettings } from './peer-settings.js';
import { Pings } from './pings.js';
import type { ReceiveWindows } from './receive-windows.js';
import type { StreamIds } from './stream-ids.js';

export const SELF_DEPENDENCY = 'stream depends on itself (RFC 9113 §5.3.1)';

/** What the control-frame handlers need of their connection; H2Connection gives it privately. */
export interface ControlHost {
  readonly peer: H2PeerSettings;
  readonly streams: ReadonlyMap<number, H2Stream>;
  readonly windows: ReceiveWindows;
  readonly data: DataScheduler;
  readonly ids: StreamIds;
  readonly floods: FloodCounters;
  writeControl(frame: Buffer): void;
  /** RFC 9113 §5.4.1: GOAWAY with the code, the connection ends. */
  connectionError(code: number, reason: string): undefined;
  /** RFC 9113 §5.4.2: RST_STREAM with the code, the connection goes on. */
  streamError(stream: H2Stream, code: number, reason: string): undefined;
  /** RST_STREAM for a stream that has no H2Stream. */
  refuse(id: number, code: number, reason: string): undefined;
  /** False, after ending the connection, when a flood count went over its limit. */
  within(breach: FloodBreach | undefined): boolean;
  flushStream(stream: H2Stream): void;
  /** The stream is closed: dropped from the connection. */
  forget(stream: H2Stream): void;
  /** 'remoteSettings' after each SETTINGS from the peer. */
  remoteSettings(peer: H2PeerSettings): void;
  /** 'goaway' once the streams the peer never processed were refused. */
  goaway(code: number, lastStreamId: number, debug: Buffer): void;
}

/**
 * The connection-level frames of RFC 9113 (SETTINGS §6.5, PING §6.7, GOAWAY §6.8,
 * WINDOW_UPDATE §6.9, PRIORITY §6.3) and the state only they change: whether the peer's
 * SETTINGS came, our SETTINGS awaiting their ACK, our PINGs in flight, whether the peer sent
 * GOAWAY. Streams, headers and resets stay in H2Connection.
 */
export class ControlFrames {
  readonly #host: ControlHost;
  /** Callbacks of our SETTINGS in flight, oldest first (RFC 9113 §6.5.3: ACKs come in order). */
  readonly #settingsCallbacks: ((() => void) | undefined)[] = [];
  readonly pings = new Pings();
  #gotSettings = false;
  #goawayReceived = false;

  constructor(host: ControlHost) {
    this.#host = host;
  }

  /** The peer's SETTINGS arrived: until then the only frame allowed is SETTINGS (§3.4). */
  get gotSettings(): boolean {
    return this.#gotSettings;
  }

  get goawayReceived(): boolean {
    return this.#goawayReceived;
  }

  /** Our SETTINGS frame with these values, `callback` to run at its ACK. */
  sendSettings(values: Map<number, number>, window: number | undefined, callback?: () => void): void {
    this.#host.windows.settingsSent(window);
    this.#settingsCallbacks.push(callback);
    this.#host.writeControl(settingsFrame(values));
  }

  /** One of the frames above, or a frame of an unknown type (§5.5: ignored, but counted). */
  onFrame(type: number, flags: number, streamId: number, payload: Buffer): undefined {
    const host = this.#host;
    switch (type) {
      case FrameType.SETTINGS:
        return this.#onSettings(flags, streamId, payload);
      case FrameType.WINDOW_UPDATE:
        if (!host.within(host.floods.windowUpdate(host.data.framesSent))) return;
        return this.#onWindowUpdate(streamId, payload);
      case FrameType.PING:
        return this.#onPing(flags, streamId, payload);
      case FrameType.GOAWAY:
        return this.#onGoaway(streamId, payload);
      case FrameType.PRIORITY:
        if (streamId === 0) return host.connectionError(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (!host.within(host.floods.idleFrame())) return;
        if (payload.length !== 5)
          return host.refuse(streamId, ErrorCode.FRAME_SIZE_ERROR, 'PRIORITY not 5 bytes');
        if ((payload.readUInt32BE(0) & 0x7fffffff) === streamId) return this.#onSelfDependency(streamId);
        return;
      default:
        host.within(host.floods.idleFrame());
        return;
    }
  }

  /** PRIORITY naming its own stream (RFC 9113 §5.3.1): a stream error PROTOCOL_ERROR. */
  #onSelfDependency(streamId: number): undefined {
    const stream = this.#host.streams.get(streamId);
    if (stream !== undefined)
      return this.#host.streamError(stream, ErrorCode.PROTOCOL_ERROR, SELF_DEPENDENCY);
    return this.#host.refuse(streamId, ErrorCode.PROTOCOL_ERROR, SELF_DEPENDENCY);
  }

  #onSettings(flags: number, streamId: number, payload: Buffer): undefined {
    const host = this.#host;
    if (streamId !== 0) return host.connectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & Flag.ACK) {
      if (payload.length !== 0)
        return host.connectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      host.windows.settingsAcked(host.streams.values());
      this.#settingsCallbacks.shift()?.();
      return;
    }
    const applied = applyPeerSettings(host.peer, payload);
    if (!applied.ok) return host.connectionError(applied.error.code, applied.error.reason);
    for (const s of host.streams.values()) {
      s.sendWindow += applied.value;
      if (s.sendWindow > MAX_WINDOW_BYTES) {
        return host.connectionError(ErrorCode.FLOW_CONTROL_ERROR, `window of stream ${s.id} above 2^31-1`);
      }
    }
    this.#gotSettings = true;
    host.writeControl(SETTINGS_ACK);
    host.data.wake();
    host.remoteSettings(host.peer);
  }

  #onWindowUpdate(streamId: number, payload: Buffer): undefined {
    const host = this.#host;
    if (payload.length !== 4)
      return host.connectionError(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE not 4 bytes');
    const increment = payload.readUInt32BE(0) & MAX_WINDOW_BYTES;
    if (streamId === 0) {
      if (increment === 0) return host.connectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      host.data.sendWindow += increment;
      if (host.data.sendWindow > MAX_WINDOW_BYTES) {
        return host.connectionError(ErrorCode.FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
      }
      host.data.wake();
      return;
    }
    const stream = host.streams.get(streamId);
    if (stream === undefined) {
      if (host.ids.isIdle(streamId))
        host.connectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    if (increment === 0) return host.streamError(stream, ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW_BYTES) {
      return host.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR, 'stream window above 2^31-1');
    }
    host.flushStream(stream);
  }

  #onPing(flags: number, streamId: number, payload: Buffer): undefined {
    const host = this.#host;
    if (streamId !== 0) return host.connectionError(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
    if (payload.length !== 8) return host.connectionError(ErrorCode.FRAME_SIZE_ERROR, 'PING not 8 bytes');
    if (!(flags & Flag.ACK)) {
      host.writeControl(pingFrame(Buffer.from(payload), true));
      return;
    }
    this.pings.acked(payload);
  }

  #onGoaway(streamId: number, payload: Buffer): undefined {
    const host = this.#host;
    if (streamId !== 0) return host.connectionError(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
    if (payload.length < 8) return host.connectionError(ErrorCode.FRAME_SIZE_ERROR, 'GOAWAY under 8 bytes');
    const last = payload.readUInt32BE(0) & MAX_WINDOW_BYTES;
    const code = payload.readUInt32BE(4);
    this.#goawayReceived = true;
    // Streams above `last` were never processed (RFC 9113 §6.8): refused, so they may be retried.
    for (const s of [...host.streams.values()]) {
      if (host.ids.isPeers(s.id) || s.id <= last) continue;
      s.rstCode = ErrorCode.REFUSED_STREAM;
      host.forget(s);
      s.receiveReset(ErrorCode.REFUSED_STREAM);
    }
    host.goaway(code, last, Buffer.from(payload.subarray(8)));
  }
}
