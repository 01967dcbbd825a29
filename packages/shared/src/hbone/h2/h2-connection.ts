import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { ZmeshError } from '../../errors/index.js';
import { ControlFrames, SELF_DEPENDENCY } from './control-frames.js';
import { DataScheduler } from './data-scheduler.js';
import {
  DEFAULT_FLOOD_LIMITS,
  type FloodBreach,
  FloodCounters,
  type FloodKind,
  type H2FloodLimits,
} from './flood-limits.js';
import {
  ErrorCode,
  Flag,
  FrameType,
  goawayFrame,
  MAX_WINDOW_BYTES,
  PREFACE,
  rstStreamFrame,
  Setting,
  windowUpdateFrame,
} from './frame.js';
import { FrameReader, type FrameSink } from './frame-reader.js';
import { FrameWriter } from './frame-writer.js';
import { outgoingFields, receivedHeaders } from './h2-headers.js';
import { type H2OutgoingHeaders, H2Stream, type StreamHost } from './h2-stream.js';
import { type ConnectionFault, type HeaderBlock, HeaderBlocks, headerFrames } from './header-blocks.js';
import { HpackEncoder } from './hpack.js';
import { defaultPeerSettings, type H2PeerSettings } from './peer-settings.js';
import { ReceiveWindows } from './receive-windows.js';
import { isPrematureReset, PrematureResets } from './reset-counter.js';
import { StreamIds } from './stream-ids.js';

/** Our SETTINGS (RFC 9113 §6.5.2). */
export interface H2LocalSettings {
  initialWindowSize: number;
  maxFrameSize: number;
  /** Streams the peer may open on us at once (a client says 0: no push). */
  maxConcurrentStreams: number;
  maxHeaderListSize: number;
}

export interface H2ConnectionOptions {
  role: 'client' | 'server';
  settings: H2LocalSettings;
  /** Our connection-level receive window (RFC 9113 §6.9.2 starts it at 65,535). */
  connectionWindow: number;
  /** What the peer may send without doing work (flood-limits.ts); default DEFAULT_FLOOD_LIMITS. */
  floodLimits?: Partial<H2FloodLimits>;
}

export type { H2PeerSettings };

/**
 * One HTTP/2 connection (RFC 9113) over a socket, for either role: framing, HPACK, flow
 * control, stream states, SETTINGS, PING and GOAWAY. Only what HBONE needs is here: no
 * push, no priorities (PRIORITY is read and ignored, RFC 9113 §5.3.2). It replaces
 * node:http2 on the HBONE data path, which crosses between C++ and JavaScript several
 * times per DATA frame (docs/performance.md, "Bulk transfer").
 *
 * Events: 'remoteSettings' (settings) after each SETTINGS from the peer; 'stream'
 * (stream, headers) on a server for each new request; 'goaway' (code, lastStreamId,
 * debug); 'protocolError' (ZmeshError) for every error the peer caused, stream-level
 * ones included; 'error' (Error) when the connection fails; 'close' once the socket closed.
 */
export class H2Connection extends EventEmitter implements FrameSink, StreamHost {
  readonly socket: Duplex & { remoteAddress?: string | undefined };
  readonly role: 'client' | 'server';
  readonly #reader: FrameReader;
  readonly #writer: FrameWriter;
  readonly #data: DataScheduler;
  readonly #windows: ReceiveWindows;
  readonly #blocks = new HeaderBlocks();
  readonly #encoder = new HpackEncoder();
  readonly #streams = new Map<number, H2Stream>();
  readonly #local: H2LocalSettings;
  readonly #peer = defaultPeerSettings();
  readonly #control: ControlFrames;
  readonly #ids: StreamIds;
  #peerStreams = 0;
  readonly #limits: H2FloodLimits;
  /** Premature peer resets, by Envoy's rule (reset-counter.ts). */
  readonly #resets: PrematureResets;
  readonly #floods: FloodCounters;
  /** The stream the DATA frame being read belongs to. */
  #current: H2Stream | undefined;
  #goawaySent = false;
  #closing = false;
  #destroyed = false;
  #closeEmitted = false;

  constructor(socket: Duplex, opts: H2ConnectionOptions) {
    super();
    this.socket = socket as H2Connection['socket'];
    this.role = opts.role;
    this.#local = { ...opts.settings };
    this.#ids = new StreamIds(opts.role);
    this.#limits = { ...DEFAULT_FLOOD_LIMITS, ...opts.floodLimits };
    this.#resets = new PrematureResets(this.#limits);
    this.#floods = new FloodCounters(this.#limits);
    this.#writer = new FrameWriter(socket);
    this.#data = new DataScheduler(this.#writer, {
      maxFrame: () => this.#peer.maxFrameSize,
      onLocalEnd: (stream) => this.#maybeClosed(stream),
    });
    this.#windows = new ReceiveWindows(opts.settings.initialWindowSize, opts.connectionWindow);
    this.#control = new ControlFrames({
      peer: this.#peer,
      streams: this.#streams,
      windows: this.#windows,
      data: this.#data,
      ids: this.#ids,
      floods: this.#floods,
      writeControl: (frame) => this.#writeControl(frame),
      connectionError: (code, reason) => this.#connectionError(code, reason),
      streamError: (stream, code, reason) => this.#streamError(stream, code, reason),
      refuse: (id, code, reason) => this.#refuse(id, code, reason),
      within: (breach) => this.#within(breach),
      flushStream: (stream) => this.flushStream(stream),
      forget: (stream) => this.#forget(stream),
      remoteSettings: (peer) => this.emit('remoteSettings', peer),
      goaway: (code, last, debug) => {
        this.emit('goaway', code, last, debug);
        this.#maybeFinish();
      },
    });
    this.#reader = new FrameReader(this, {
      maxFrameBytes: opts.settings.maxFrameSize,
      expectPreface: opts.role === 'server',
    });
    socket.on('data', (chunk: Buffer) => this.#reader.push(chunk));
    socket.on('end', () => this.destroy());
    socket.on('error', (e: Error) => this.destroy(e));
    socket.on('close', () => this.#onSocketClose());
    this.#start();
  }

  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** close() was called or the connection is gone: no new streams from us. */
  get closed(): boolean {
    return this.#closing || this.#destroyed;
  }

  get goawayReceived(): boolean {
    return this.#control.goawayReceived;
  }

  get remoteSettings(): Readonly<H2PeerSettings> {
    return this.#peer;
  }

  get streamCount(): number {
    return this.#streams.size;
  }

  #start(): void {
    const values = new Map<number, number>([
      [Setting.ENABLE_PUSH, 0],
      [Setting.MAX_CONCURRENT_STREAMS, this.#local.maxConcurrentStreams],
      [Setting.INITIAL_WINDOW_SIZE, this.#local.initialWindowSize],
      [Setting.MAX_FRAME_SIZE, this.#local.maxFrameSize],
      [Setting.MAX_HEADER_LIST_SIZE, this.#local.maxHeaderListSize],
    ]);
    if (this.role === 'client') this.#writer.write(PREFACE);
    this.#control.sendSettings(values, this.#local.initialWindowSize, undefined);
    const raise = this.#windows.openConnection();
    if (raise > 0) this.#writer.write(windowUpdateFrame(0, raise));
  }

  /** Client: opens a stream with these request headers. Throws when no stream can be opened. */
  request(headers: H2OutgoingHeaders, opts: { endStream?: boolean } = {}): H2Stream {
    if (this.role !== 'client') throw new Error('only a client opens streams');
    if (this.closed || this.#control.goawayReceived) throw new Error('connection is closing');
    if (this.#streams.size >= this.#peer.maxConcurrentStreams) {
      throw new Error(`peer allows ${this.#peer.maxConcurrentStreams} concurrent streams`);
    }
    const fields = outgoingFields(headers);
    const id = this.#ids.allocate();
    const windows = { send: this.#peer.initialWindowSize, recv: this.#windows.newStream };
    const stream = new H2Stream(this, id, windows, true);
    this.#streams.set(id, stream);
    const endStream = opts.endStream === true;
    this.#writeHeaders(id, fields, endStream);
    if (endStream) {
      stream.localEnded = true;
      stream.end();
    }
    return stream;
  }

  /** Sends SETTINGS with a new initial stream window; `callback` runs once the peer acknowledged it. */
  settings(values: { initialWindowSize?: number }, callback?: () => void): void {
    if (this.#destroyed) throw new Error('connection destroyed');
    const window = values.initialWindowSize;
    if (window !== undefined && window > MAX_WINDOW_BYTES)
      throw new RangeError('initial window above 2^31-1');
    const map = new Map<number, number>(window === undefined ? [] : [[Setting.INITIAL_WINDOW_SIZE, window]]);
    this.#control.sendSettings(map, window, callback);
  }

  /** PING (RFC 9113 §6.7); `callback` gets the round trip in ms. False if it could not be sent. */
  ping(callback: (error: Error | null, ms: number) => void): boolean {
    if (this.#destroyed) return false;
    const ping = this.#control.pings.start(callback);
    if (ping === undefined) return false;
    this.#writeControl(ping);
    return true;
  }

  /** Sends GOAWAY (RFC 9113 §6.8) without closing; close() or destroy() ends the connection. */
  goaway(code: number = ErrorCode.NO_ERROR, lastStreamId?: number, debug?: Buffer): void {
    if (this.#destroyed) return;
    this.#goawaySent = true;
    this.#writer.write(goawayFrame(lastStreamId ?? this.#ids.lastPeer, code, debug));
  }

  /** Graceful: GOAWAY(NO_ERROR) unless one went already, no new streams, the socket ends with the last stream. */
  close(): void {
    if (this.#closing || this.#destroyed) return;
    this.#closing = true;
    if (!this.#goawaySent) this.goaway(ErrorCode.NO_ERROR);
    this.#maybeFinish();
  }

  /**
   * Immediate: every open stream is cut (its reader sees 'aborted'), queued frames (a
   * GOAWAY just sent) still leave, then the socket closes.
   */
  destroy(error?: Error): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.#reader.stop();
    const streams = [...this.#streams.values()];
    this.#streams.clear();
    this.#data.clear();
    for (const s of streams) s.receiveReset(s.rstCode ?? ErrorCode.CANCEL);
    this.#control.pings.failAll(new Error('connection closed'));
    this.#writer.end();
    if (error && this.listenerCount('error') > 0) this.emit('error', error);
    if (this.socket.destroyed) process.nextTick(() => this.#onSocketClose());
  }

  #onSocketClose(): void {
    if (!this.#destroyed) this.destroy();
    if (this.#closeEmitted) return;
    this.#closeEmitted = true;
    this.emit('close');
  }

  #maybeFinish(): void {
    if ((this.#closing || this.#control.goawayReceived) && this.#streams.size === 0) this.destroy();
  }

  // --- writing ---

  #writeControl(buf: Buffer): void {
    if (this.#writer.flooded) {
      this.#connectionError(ErrorCode.ENHANCE_YOUR_CALM, 'peer does not read the control frames it causes');
      return;
    }
    this.#writer.write(buf);
  }

  #writeHeaders(id: number, fields: ReturnType<typeof outgoingFields>, endStream: boolean): void {
    const block = this.#encoder.encode(fields);
    for (const f of headerFrames(block, id, endStream, this.#peer.maxFrameSize)) this.#writer.write(f);
  }

  // --- StreamHost: what streams ask of their connection ---

  respond(stream: H2Stream, headers: H2OutgoingHeaders, endStream: boolean): void {
    if (this.#destroyed) return;
    this.#writeHeaders(stream.id, outgoingFields(headers), endStream);
    if (endStream) {
      stream.localEnded = true;
      this.#maybeClosed(stream);
    }
  }

  flushStream(stream: H2Stream): void {
    if (this.#destroyed || !stream.headersSent || stream.localEnded) return;
    if (this.#streams.get(stream.id) === stream) this.#data.flush(stream);
  }

  streamRead(stream: H2Stream): void {
    this.#maybeGrant(stream);
  }

  resetStream(stream: H2Stream, code: number): void {
    if (stream.rstCode === undefined) stream.rstCode = code;
    if (this.#streams.get(stream.id) !== stream) return;
    this.#writeControl(rstStreamFrame(stream.id, code));
    this.#forget(stream, 'reset');
  }

  streamDestroyed(stream: H2Stream, error: Error | null): void {
    if (this.#streams.get(stream.id) !== stream) return;
    // RST_STREAM(NO_ERROR) for a plain destroy, as node:http2 sends; the splice and the
    // tenancy copy reset abrupt ends with their own codes first.
    if (!stream.protocolClosed)
      this.resetStream(stream, error ? ErrorCode.INTERNAL_ERROR : ErrorCode.NO_ERROR);
    else this.#forget(stream);
  }

  #maybeClosed(stream: H2Stream): void {
    if (stream.protocolClosed) this.#forget(stream);
  }

  /** Envoy's isPrematureRstStream: no response yet, and younger than its minimum lifetime. */
  #premature(stream: H2Stream): boolean {
    return this.#ids.isPeers(stream.id) && isPrematureReset(stream.headersSent, stream.openedAt);
  }

  #forget(stream: H2Stream, how: 'closed' | 'reset' = 'closed'): void {
    if (this.#streams.get(stream.id) !== stream) return;
    if (this.#ids.isPeers(stream.id)) this.#resets.streamEnded();
    this.#ids.closed(stream.id, how);
    this.#streams.delete(stream.id);
    this.#data.forget(stream);
    if (this.#current === stream) this.#current = undefined;
    if (this.#ids.isPeers(stream.id)) this.#peerStreams--;
    this.#maybeFinish();
  }

  #maybeGrant(stream: H2Stream): void {
    if (this.#destroyed || stream.remoteEnded || stream.rstCode !== undefined) return;
    const grant = this.#windows.streamGrant(stream);
    if (grant > 0) this.#writer.write(windowUpdateFrame(stream.id, grant));
  }

  // --- errors ---

  /** RFC 9113 §5.4.1: GOAWAY with the code, then the connection ends. */
  #connectionError(code: number, reason: string): undefined {
    if (this.#destroyed) return;
    const error = protocolError(code, reason, this.role);
    this.emit('protocolError', error);
    this.#goawaySent = true;
    this.#writer.write(goawayFrame(this.#ids.lastPeer, code, Buffer.from(reason.slice(0, 256))));
    this.destroy(error);
  }

  /**
   * A flood: GOAWAY ENHANCE_YOUR_CALM and the connection ends. 'flood' (kind) lets the
   * owner count it; 'protocolError' carries the ZM_ERR code as for any peer error.
   */
  #flood(kind: FloodKind, error: ZmeshError): undefined {
    if (this.#destroyed) return;
    this.emit('flood', kind, error);
    this.emit('protocolError', error);
    this.#goawaySent = true;
    this.#writer.write(goawayFrame(this.#ids.lastPeer, ErrorCode.ENHANCE_YOUR_CALM, Buffer.from(error.code)));
    this.destroy(error);
  }

  /** False, after ending the connection, when a count went over its limit. */
  #within(breach: FloodBreach | undefined): boolean {
    if (breach === undefined) return true;
    this.#flood(breach.kind, new ZmeshError('ZM_ERR_HBONE_FLOOD', { ...breach }));
    return false;
  }

  #fault(fault: ConnectionFault): undefined {
    return this.#connectionError(fault.code, fault.reason);
  }

  /** RFC 9113 §5.4.2: RST_STREAM with the code; the connection goes on. */
  #streamError(stream: H2Stream, code: number, reason: string): undefined {
    this.emit('protocolError', protocolError(code, reason, this.role));
    this.resetStream(stream, code);
    stream.receiveReset(code);
  }

  /**
   * A frame on a peer stream that is neither idle nor open (RFC 9113 §5.1, §5.1.1): ignored
   * if we reset it, STREAM_CLOSED if it closed otherwise, PROTOCOL_ERROR if the id was never
   * opened (it went backwards). Only a server judges: a client drops what it does not know.
   */
  #onNotOpen(id: number, what: string): undefined {
    if (this.role !== 'server' || !this.#ids.isPeers(id)) return;
    const how = this.#ids.howClosed(id);
    if (how === 'reset') return;
    if (how === 'closed')
      return this.#connectionError(ErrorCode.STREAM_CLOSED, `${what} on closed stream ${id}`);
    if (what === 'HEADERS') {
      return this.#connectionError(ErrorCode.PROTOCOL_ERROR, `stream id ${id} below ${this.#ids.lastPeer}`);
    }
  }

  /** Refuses a stream we never opened a Duplex for. */
  #refuse(id: number, code: number, reason?: string): undefined {
    this.#ids.closed(id, 'reset');
    if (reason !== undefined) this.emit('protocolError', protocolError(code, reason, this.role));
    this.#writeControl(rstStreamFrame(id, code));
  }

  // --- reading (FrameSink) ---

  onFramingError(code: number, reason: string): void {
    this.#connectionError(code, reason);
  }

  onDataStart(streamId: number, _flags: number, length: number): undefined {
    this.#current = undefined;
    if (!this.#expectFrame(FrameType.DATA, streamId)) return;
    if (streamId === 0) return this.#connectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on stream 0');
    if (!this.#within(this.#floods.empty(length, (_flags & Flag.END_STREAM) !== 0))) return;
    const grant = this.#windows.connectionArrival(length);
    if (grant === false) {
      return this.#connectionError(ErrorCode.FLOW_CONTROL_ERROR, 'DATA beyond the connection window');
    }
    if (grant > 0) this.#writer.write(windowUpdateFrame(0, grant));
    const stream = this.#streams.get(streamId);
    if (stream === undefined) {
      // A stream we reset may still receive what was in flight; an unopened one may not.
      if (this.#ids.isIdle(streamId))
        this.#connectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on an idle stream');
      else this.#onNotOpen(streamId, 'DATA');
      return;
    }
    if (stream.remoteEnded)
      return this.#streamError(stream, ErrorCode.STREAM_CLOSED, 'DATA after END_STREAM');
    if (!this.#windows.fits(stream, length)) {
      return this.#streamError(stream, ErrorCode.FLOW_CONTROL_ERROR, 'DATA beyond the stream window');
    }
    stream.recvWindow -= length;
    this.#current = stream;
  }

  onData(_streamId: number, chunk: Buffer): void {
    const stream = this.#current;
    if (stream !== undefined && !stream.destroyed) stream.receiveData(chunk);
  }

  onDataEnd(_streamId: number, flags: number): void {
    const stream = this.#current;
    this.#current = undefined;
    if (stream === undefined || stream.destroyed) return;
    if (flags & Flag.END_STREAM) {
      stream.receiveEnd();
      this.#maybeClosed(stream);
    } else {
      this.#maybeGrant(stream);
    }
  }

  onFrame(type: number, flags: number, streamId: number, payload: Buffer): undefined {
    if (!this.#expectFrame(type, streamId)) return;
    switch (type) {
      case FrameType.HEADERS:
        if (streamId === 0) return this.#connectionError(ErrorCode.PROTOCOL_ERROR, 'HEADERS on stream 0');
        if (!this.#within(this.#floods.empty(payload.length, (flags & Flag.END_STREAM) !== 0))) return;
        this.#floods.headerBlockStarted();
        return this.#onBlock(this.#blocks.headers(streamId, flags, payload));
      case FrameType.CONTINUATION:
        if (!this.#within(this.#floods.empty(payload.length, false))) return;
        if (!this.#within(this.#floods.continuation())) return;
        return this.#onBlock(this.#blocks.continuation(flags, payload));
      case FrameType.RST_STREAM:
        return this.#onReset(streamId, payload);
      case FrameType.PUSH_PROMISE:
        return this.#connectionError(ErrorCode.PROTOCOL_ERROR, 'PUSH_PROMISE with push disabled');
      default: // SETTINGS, PING, GOAWAY, WINDOW_UPDATE, PRIORITY and unknown types
        return this.#control.onFrame(type, flags, streamId, payload);
    }
  }

  /** The first frame is SETTINGS (§3.4); a header block admits nothing but its CONTINUATION (§6.10). */
  #expectFrame(type: number, streamId: number): boolean {
    let reason: string | undefined;
    const pending = this.#blocks.pendingStream;
    if (!this.#control.gotSettings && type !== FrameType.SETTINGS) reason = 'first frame is not SETTINGS';
    else if (pending !== undefined && (type !== FrameType.CONTINUATION || streamId !== pending)) {
      reason = 'header block interrupted';
    } else if (pending === undefined && type === FrameType.CONTINUATION)
      reason = 'CONTINUATION without HEADERS';
    if (reason === undefined) return true;
    this.#connectionError(ErrorCode.PROTOCOL_ERROR, reason);
    return false;
  }

  #onBlock(result: ReturnType<HeaderBlocks['headers']>): undefined {
    if (!result.ok) return this.#fault(result.error);
    const block = result.value;
    if (block === undefined) return;
    const stream = this.#streams.get(block.streamId);
    if (stream !== undefined) return this.#onStreamHeaders(stream, block);
    if (!this.#ids.isIdle(block.streamId)) return this.#onNotOpen(block.streamId, 'HEADERS');
    if (this.role === 'client' || !this.#ids.isPeers(block.streamId)) {
      return this.#connectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS opening stream ${block.streamId}`);
    }
    this.#onRequest(block);
  }

  /** A new request from the client (RFC 9113 §8.1). */
  #onRequest(block: HeaderBlock): undefined {
    const id = block.streamId;
    this.#ids.peerOpened(id);
    this.#floods.streamOpened();
    if (this.#goawaySent) return this.#refuse(id, ErrorCode.REFUSED_STREAM);
    if (block.dependsOnItself) return this.#refuse(id, ErrorCode.PROTOCOL_ERROR, SELF_DEPENDENCY);
    if (block.listBytes > this.#local.maxHeaderListSize) {
      return this.#refuse(
        id,
        ErrorCode.ENHANCE_YOUR_CALM,
        `header list of ${block.listBytes} bytes over ${this.#local.maxHeaderListSize}`,
      );
    }
    const headers = receivedHeaders(block.fields, 'request');
    if (!headers.ok) return this.#refuse(id, ErrorCode.PROTOCOL_ERROR, headers.error);
    // RFC 9113 §5.1.2: beyond our limit, REFUSED_STREAM, which a client may retry.
    if (this.#peerStreams >= this.#local.maxConcurrentStreams)
      return this.#refuse(id, ErrorCode.REFUSED_STREAM);
    const windows = { send: this.#peer.initialWindowSize, recv: this.#windows.newStream };
    const stream = new H2Stream(this, id, windows, false);
    this.#streams.set(id, stream);
    this.#peerStreams++;
    if (block.flags & Flag.END_STREAM) stream.receiveEnd();
    this.emit('stream', stream, headers.value);
  }

  /** HEADERS on an open stream: a client's response (1xx skipped, §8.1), or trailers, which must end it. */
  #onStreamHeaders(stream: H2Stream, block: HeaderBlock): undefined {
    const endStream = (block.flags & Flag.END_STREAM) !== 0;
    if (block.dependsOnItself) return this.#streamError(stream, ErrorCode.PROTOCOL_ERROR, SELF_DEPENDENCY);
    if (stream.remoteEnded)
      return this.#streamError(stream, ErrorCode.STREAM_CLOSED, 'HEADERS after END_STREAM');
    const isResponse = this.role === 'client' && !stream.responded;
    if (!isResponse && !endStream) {
      return this.#streamError(stream, ErrorCode.PROTOCOL_ERROR, 'trailers without END_STREAM');
    }
    const headers = receivedHeaders(block.fields, isResponse ? 'response' : 'trailers');
    if (!headers.ok) return this.#streamError(stream, ErrorCode.PROTOCOL_ERROR, headers.error);
    if (isResponse) {
      if (Number(headers.value[':status']) < 200) {
        if (endStream)
          this.#streamError(stream, ErrorCode.PROTOCOL_ERROR, 'informational response ends the stream');
        return;
      }
      stream.responded = true;
      stream.emit('response', headers.value, block.flags);
    }
    if (endStream && !stream.destroyed) {
      stream.receiveEnd();
      this.#maybeClosed(stream);
    }
  }

  #onReset(streamId: number, payload: Buffer): undefined {
    if (streamId === 0) return this.#connectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
    if (payload.length !== 4)
      return this.#connectionError(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM not 4 bytes');
    const stream = this.#streams.get(streamId);
    // Rapid reset (CVE-2023-44487), counted as Envoy counts it: only premature resets (any
    // code, NO_ERROR too) of a stream we have not answered, in its first second; a reset of
    // a stream that completed or was answered is an ordinary end. Counted here, as the frame
    // is read, before the owner starts work (a dial) for any stream of this read.
    if (this.role === 'server' && stream !== undefined && this.#premature(stream)) {
      const breach = this.#resets.reset();
      if (breach) return this.#flood('rst_stream', breach);
    }
    if (stream === undefined) {
      if (this.#ids.isIdle(streamId))
        this.#connectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
      return;
    }
    stream.rstCode = payload.readUInt32BE(0);
    this.#forget(stream);
    stream.receiveReset(stream.rstCode);
  }
}

function protocolError(code: number, reason: string, role: 'client' | 'server'): ZmeshError {
  const name = Object.entries(ErrorCode).find(([, v]) => v === code)?.[0] ?? `0x${code.toString(16)}`;
  return new ZmeshError('ZM_ERR_HBONE_PROTOCOL', {
    h2Error: name,
    side: role === 'server' ? 'client' : 'server',
    reason,
  });
}
