/** HTTP/2 numbers for HBONE (docs/design.md §4). Each is a named bound; the tests may shrink timers. */
const KiB = 1024;
const MiB = 1024 * KiB;

/** SETTINGS_INITIAL_WINDOW_SIZE: per-stream receive window. */
export const STREAM_WINDOW_BYTES = 4 * MiB;
/**
 * The sum of stream windows a session may promise (see `StreamWindows`): the bytes one
 * HBONE connection can make this proxy buffer for readers that are not reading. Up to
 * four streams keep the full window; 32 streams get 512 KiB each.
 */
export const SESSION_STREAM_WINDOWS_BYTES = 16 * MiB;
/**
 * `shared`: a session's stream windows split SESSION_STREAM_WINDOWS_BYTES (see
 * `StreamWindows`); `fixed`: every stream keeps STREAM_WINDOW_BYTES, as a proxy without
 * tenancy does (ztunnel's `--fairness off`).
 */
export type StreamWindowMode = 'shared' | 'fixed';
/** The smallest per-stream window a crowded session shrinks to (about HTTP/2's default). */
export const MIN_STREAM_WINDOW_BYTES = 64 * KiB;
/** Connection-level receive window (WINDOW_UPDATE on stream 0; RFC 9113 §6.9.2). */
export const CONNECTION_WINDOW_BYTES = 16 * MiB;
/** SETTINGS_MAX_FRAME_SIZE we accept. */
export const MAX_FRAME_BYTES = 1 * MiB;
/** SETTINGS_MAX_CONCURRENT_STREAMS a server advertises. */
export const SERVER_MAX_CONCURRENT_STREAMS = 200;
/** Streams a client puts on one connection before opening another (pool's bound). */
export const CLIENT_MAX_STREAMS_PER_CONNECTION = 100;
/** SETTINGS_MAX_HEADER_LIST_SIZE: a CONNECT needs a few hundred bytes. */
export const MAX_HEADER_LIST_BYTES = 16 * KiB;
export const PING_INTERVAL_MS = 10_000;
/** A session whose PING is unanswered this long is dead and is destroyed. */
export const PING_TIMEOUT_MS = 20_000;
/**
 * Rapid reset (CVE-2023-44487): more than this many RST_STREAM from the peer within
 * the window ends the connection with GOAWAY ENHANCE_YOUR_CALM.
 */
export const RAPID_RESET_LIMIT = 100;
export const RAPID_RESET_WINDOW_MS = 1000;
/** TLS handshake + HTTP/2 preface must finish within this. */
export const HANDSHAKE_TIMEOUT_MS = 10_000;
/**
 * A listener's TLS server (its OpenSSL context: ~40 KiB with key, chain and roots) is
 * built at its first connection and dropped after this long without one open: on a node
 * most pods' 15008 sits unused, and 100 pods held ~5 MB of contexts for it.
 */
export const TLS_CONTEXT_IDLE_MS = 60_000;
/** Default drain grace: streams still open after this are reset. */
export const DRAIN_GRACE_MS = 5_000;

export interface KeepaliveTiming {
  intervalMs: number;
  timeoutMs: number;
}

export const DEFAULT_KEEPALIVE: KeepaliveTiming = {
  intervalMs: PING_INTERVAL_MS,
  timeoutMs: PING_TIMEOUT_MS,
};

/** Local SETTINGS sent by both ends (RFC 9113 §6.5.2); ENABLE_PUSH is always 0. */
export function localSettings(maxConcurrentStreams: number) {
  return {
    initialWindowSize: STREAM_WINDOW_BYTES,
    maxFrameSize: MAX_FRAME_BYTES,
    maxConcurrentStreams,
    maxHeaderListSize: MAX_HEADER_LIST_BYTES,
  };
}
