/**
 * Bounds on what an HTTP/2 peer can make a connection hold or do without sending data
 * (docs/hardening.md). Modelled on Envoy's defaults (Http2ProtocolOptions:
 * max_consecutive_inbound_frames_with_empty_payload 1, max_inbound_priority_frames_per_stream
 * 100, max_inbound_window_update_frames_per_data_frame_sent 10) and nghttp2's CONTINUATION bound (CVE-2024-27316); premature resets (of every code) are
 * counted as they are read (CVE-2023-44487), as Envoy counts them. Exceeding one is a connection error ENHANCE_YOUR_CALM.
 */
export interface H2FloodLimits {
  /** Consecutive HEADERS, CONTINUATION and DATA frames with an empty payload and no END_STREAM. */
  emptyFrames: number;
  /** CONTINUATION frames one header block may have (after its HEADERS). */
  continuationFrames: number;
  /** PRIORITY and unknown-type frames, per stream the peer opened plus one. */
  idleFramesPerStream: number;
  /**
   * Premature resets from the peer (RST_STREAM of any code, NO_ERROR too, on a stream we have
   * not answered, within PREMATURE_RESET_LIFETIME_MS of its opening: Envoy's
   * isPrematureRstStream) within `resetWindowMs`. A reset of a stream that completed, or that
   * we had answered, is an ordinary end and is not counted.
   */
  resets: number;
  resetWindowMs: number;
  /**
   * Envoy's overload.premature_reset_total_stream_count (500): over the session, premature
   * resets may be at most half of the peer's streams that ended, or, before this many ended,
   * fewer than half of this number.
   */
  prematureResetStreams: number;
  /**
   * WINDOW_UPDATE frames the peer may send per DATA frame we sent; in all 5 + 2 × (streams
   * opened + this × DATA frames sent), Envoy's max_inbound_window_update_frames_per_data_frame_sent (10).
   */
  windowUpdatesPerDataFrame: number;
}

export const DEFAULT_FLOOD_LIMITS: H2FloodLimits = {
  emptyFrames: 1,
  continuationFrames: 8,
  idleFramesPerStream: 100,
  resets: 100,
  resetWindowMs: 1000,
  prematureResetStreams: 500,
  windowUpdatesPerDataFrame: 10,
};

/** Envoy's overload.premature_reset_min_stream_lifetime_seconds (1 s): a reset after it is not premature. */
export const PREMATURE_RESET_LIFETIME_MS = 1000;

/** Bounded label of the limit a peer exceeded (zmesh_hbone_floods_total{kind}). */
export type FloodKind = 'empty_frames' | 'continuation' | 'priority' | 'rst_stream' | 'window_update';

/** A limit the peer went over: the connection answers with GOAWAY ENHANCE_YOUR_CALM. */
export interface FloodBreach {
  kind: FloodKind;
  count: number;
  limit: number;
}

/**
 * One connection's counts against its H2FloodLimits, as frames are read (resets are counted
 * over time by ResetCounter). Each method returns the breach, or undefined while in bounds.
 */
export class FloodCounters {
  readonly #limits: H2FloodLimits;
  /** Streams the peer ever opened: the PRIORITY/unknown-frame budget grows with them. */
  #peerOpened = 0;
  #idleFrames = 0;
  /** WINDOW_UPDATE frames read, bounded by the DATA frames we sent. */
  #windowUpdates = 0;
  #emptyRun = 0;
  /** CONTINUATION frames of the header block being read. */
  #blockFrames = 0;

  constructor(limits: H2FloodLimits) {
    this.#limits = limits;
  }

  streamOpened(): void {
    this.#peerOpened++;
  }

  /** HEADERS, CONTINUATION and DATA: a run of empty ones without END_STREAM is a flood. */
  empty(length: number, endStream: boolean): FloodBreach | undefined {
    if (length > 0 || endStream) {
      this.#emptyRun = 0;
      return undefined;
    }
    const limit = this.#limits.emptyFrames;
    return ++this.#emptyRun <= limit ? undefined : { kind: 'empty_frames', count: this.#emptyRun, limit };
  }

  headerBlockStarted(): void {
    this.#blockFrames = 0;
  }

  continuation(): FloodBreach | undefined {
    const limit = this.#limits.continuationFrames;
    return ++this.#blockFrames <= limit
      ? undefined
      : { kind: 'continuation', count: this.#blockFrames, limit };
  }

  /** PRIORITY and unknown frames cost us nothing but reading; Envoy bounds them per stream opened. */
  idleFrame(): FloodBreach | undefined {
    const limit = this.#limits.idleFramesPerStream * (1 + this.#peerOpened);
    return ++this.#idleFrames <= limit ? undefined : { kind: 'priority', count: this.#idleFrames, limit };
  }

  /**
   * WINDOW_UPDATE frames cost a counter update each; a peer owes us some per DATA frame we
   * send and per stream. Envoy's bound: 5 + 2 × (streams opened + 10 × DATA frames sent).
   */
  windowUpdate(dataFramesSent: number): FloodBreach | undefined {
    const limit = 5 + 2 * (this.#peerOpened + this.#limits.windowUpdatesPerDataFrame * dataFramesSent);
    return ++this.#windowUpdates <= limit
      ? undefined
      : { kind: 'window_update', count: this.#windowUpdates, limit };
  }
}
