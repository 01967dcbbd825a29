/**
 * Bounds on what an HTTP/2 peer can make a connection hold or do without sending data
 * (docs/hardening.md). Modelled on Envoy's defaults (Http2ProtocolOptions:
 * max_consecutive_inbound_frames_with_empty_payload 1, max_inbound_priority_frames_per_stream
 * 100, max_inbound_window_update_frames_per_data_frame_sent 10) and nghttp2's CONTINUATION bound (CVE-2024-27316); resets of every code are counted
 * as they are read (CVE-2023-44487). Exceeding one is a connection error ENHANCE_YOUR_CALM.
 */
export interface H2FloodLimits {
  /** Consecutive HEADERS, CONTINUATION and DATA frames with an empty payload and no END_STREAM. */
  emptyFrames: number;
  /** CONTINUATION frames one header block may have (after its HEADERS). */
  continuationFrames: number;
  /** PRIORITY and unknown-type frames, per stream the peer opened plus one. */
  idleFramesPerStream: number;
  /** RST_STREAM frames from the peer (any code) within `resetWindowMs`. */
  resets: number;
  resetWindowMs: number;
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
  windowUpdatesPerDataFrame: 10,
};

/** Bounded label of the limit a peer exceeded (zmesh_hbone_floods_total{kind}). */
export type FloodKind = 'empty_frames' | 'continuation' | 'priority' | 'rst_stream' | 'window_update';
