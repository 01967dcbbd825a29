import * as http2 from 'node:http2';
import { isZmeshError, ZmeshError } from '../errors/index.js';
import { logger } from '../log/index.js';
import type { MeshMetrics } from '../metrics/index.js';
import { validateConnectHeaders } from './connect-request.js';
import { countError, type HboneMetrics } from './hbone-metrics.js';
import type { TunnelAccept, TunnelRequest } from './hbone-server.js';
import { CONNECTION_WINDOW_BYTES, type KeepaliveTiming, type StreamWindowMode } from './hbone-settings.js';
import { startKeepalive } from './keepalive.js';
import { ResetCounter } from './reset-counter.js';
import { StreamWindows } from './stream-windows.js';
import { spliceTunnel, wasResetLocally } from './tunnel-splice.js';

const log = logger('hbone');
const { NGHTTP2_NO_ERROR, NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

export interface InboundSessionDeps {
  onTunnel: (req: TunnelRequest) => Promise<TunnelAccept>;
  metrics: MeshMetrics | undefined;
  hboneMetrics: HboneMetrics | undefined;
  keepalive: KeepaliveTiming;
  rapidReset: { limit: number; windowMs: number };
  streamWindows: StreamWindowMode;
}

/** One authenticated HTTP/2 session on an HBONE listener and the CONNECT streams on it. */
export class InboundSession {
  readonly peerIdentity: string;
  readonly closed: Promise<void>;
  readonly #session: http2.ServerHttp2Session;
  readonly #deps: InboundSessionDeps;
  readonly #resets: ResetCounter;
  /** Uploads arrive here: their windows share one budget (absent when `fixed`). */
  readonly #windows: StreamWindows | undefined;

  constructor(session: http2.ServerHttp2Session, peerIdentity: string, deps: InboundSessionDeps) {
    this.#session = session;
    this.peerIdentity = peerIdentity;
    this.#deps = deps;
    this.#resets = new ResetCounter(deps.rapidReset.limit, deps.rapidReset.windowMs);
    session.setLocalWindowSize(CONNECTION_WINDOW_BYTES);
    this.#windows = deps.streamWindows === 'shared' ? new StreamWindows(session) : undefined;
    deps.hboneMetrics?.inboundSessions.inc();
    const stopKeepalive = startKeepalive(session, deps.keepalive, () => {
      log.info({ peer: peerIdentity }, 'ping timeout, closing session');
      session.destroy();
    });
    session.on('error', (e) => log.debug({ peer: peerIdentity, err: e.message }, 'session error'));
    session.on('stream', (stream, headers) => this.#onStream(stream, headers));
    this.closed = new Promise((resolve) => {
      session.once('close', () => {
        stopKeepalive();
        deps.hboneMetrics?.inboundSessions.dec();
        resolve();
      });
    });
  }

  /** GOAWAY(NO_ERROR) with the last stream processed; open streams run to completion. */
  drain(): void {
    if (!this.#session.closed && !this.#session.destroyed) this.#session.close();
  }

  destroy(): void {
    if (!this.#session.destroyed) this.#session.destroy();
  }

  #onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    const hm = this.#deps.hboneMetrics;
    hm?.inboundStreams.inc();
    this.#windows?.track(stream);
    // A peer's RST_STREAM(NO_ERROR) only ends the readable side, and Node closes the stream
    // once its reader takes that end: a tunnel whose upstream stopped reading would hold
    // the stream, its window and the upstream forever. (Any other code destroys the stream
    // at once.) The reset ends the tunnel now. Deferred: a local close() emits 'aborted'
    // before it submits its own RST_STREAM, which a destroyed stream would never send.
    stream.on('aborted', () => {
      if (stream.rstCode === NGHTTP2_NO_ERROR) setImmediate(() => stream.destroy());
    });
    stream.on('error', (e) => log.debug({ peer: this.peerIdentity, err: e.message }, 'stream error'));
    stream.on('close', () => {
      hm?.inboundStreams.dec();
      // Every RST_STREAM with an error from the peer counts: our own client ends refused
      // tunnels with END_STREAM, so only app-level aborts and attacks reset streams.
      // (Counting only streams still pending, as hyper does, is evaded by targeting an
      // authority that is answered at once.)
      const peerReset = stream.rstCode !== undefined && stream.rstCode !== NGHTTP2_NO_ERROR;
      if (peerReset && !wasResetLocally(stream) && !this.#session.destroyed) this.#onPeerReset();
    });
    const parsed = validateConnectHeaders(headers);
    if (!parsed.ok) {
      const context =
        parsed.error.code === 'ZM_ERR_HBONE_BAD_METHOD'
          ? { method: String(headers[':method']), reasons: parsed.error.reasons }
          : { authority: String(headers[':authority']), reason: parsed.error.reasons.join('; ') };
      this.#refuse(stream, new ZmeshError(parsed.error.code, context));
      return;
    }
    const request = { request: parsed.value, peerIdentity: this.peerIdentity, stream };
    // new Promise: an onTunnel that throws synchronously is a refusal, not a crash.
    new Promise<TunnelAccept>((resolve) => resolve(this.#deps.onTunnel(request))).then(
      (accept) => this.#accept(stream, accept),
      (e: unknown) => this.#refuse(stream, asZmeshError(e)),
    );
  }

  #accept(stream: http2.ServerHttp2Stream, accept: TunnelAccept): void {
    if (stream.destroyed || stream.closed) {
      accept.upstream.destroy();
      return;
    }
    stream.respond({ ':status': 200 });
    if (accept.copy) accept.copy(stream, accept.upstream);
    else spliceTunnel(stream, accept.upstream);
  }

  #refuse(stream: http2.ServerHttp2Stream, error: ZmeshError): void {
    countError(this.#deps.metrics, error);
    log.debug({ peer: this.peerIdentity, code: error.code, err: error.message }, 'tunnel refused');
    if (stream.destroyed || stream.closed || stream.headersSent) return;
    stream.respond({ ':status': error.status, 'x-zmesh-error': error.code }, { endStream: true });
  }

  #onPeerReset(): void {
    if (!this.#resets.hit()) return;
    const { limit, windowMs } = this.#deps.rapidReset;
    const error = new ZmeshError('ZM_ERR_HBONE_RAPID_RESET', { count: this.#resets.count, windowMs });
    countError(this.#deps.metrics, error);
    log.warn({ peer: this.peerIdentity, limit, windowMs }, error.message);
    // RFC 9113 §5.4.1: a connection error ends with GOAWAY carrying the code.
    this.#session.goaway(NGHTTP2_ENHANCE_YOUR_CALM, 0, Buffer.from(error.code));
    this.#session.destroy();
  }
}

function asZmeshError(e: unknown): ZmeshError {
  if (isZmeshError(e)) return e;
  return new ZmeshError(
    'ZM_ERR_INTERNAL_FAULT',
    { reason: (e as Error)?.message ?? String(e) },
    { cause: e },
  );
}
