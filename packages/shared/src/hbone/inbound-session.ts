import type { Duplex } from 'node:stream';
import { isZmeshError, ZmeshError } from '../errors/index.js';
import { logger } from '../log/index.js';
import type { MeshMetrics } from '../metrics/index.js';
import { type ConnectRequest, validateConnectHeaders } from './connect-request.js';
import type { H2Connection } from './h2/h2-connection.js';
import type { H2Headers, H2Stream } from './h2/h2-stream.js';
import { countError, type HboneMetrics } from './hbone-metrics.js';
import type { KeepaliveTiming, StreamWindowMode } from './hbone-settings.js';
import { startKeepalive } from './keepalive.js';
import { StreamWindows } from './stream-windows.js';
import { spliceTunnel } from './tunnel-splice.js';

const log = logger('hbone');

export interface TunnelRequest {
  request: ConnectRequest;
  /** The client's SPIFFE ID, from a chain verified against the bundle and in its trust domain. */
  peerIdentity: string;
  stream: H2Stream;
}

/** Resolve to accept (the server answers 200 and splices); reject with a ZmeshError to refuse. */
export type TunnelAccept = {
  upstream: Duplex;
  /**
   * Copies the accepted tunnel instead of the default splice (ztunnel's tenant byte
   * fairness); it owns both ends from then on, half-close included.
   */
  copy?: (stream: Duplex, upstream: Duplex) => void;
};

export interface InboundSessionDeps {
  onTunnel: (req: TunnelRequest) => Promise<TunnelAccept>;
  metrics: MeshMetrics | undefined;
  hboneMetrics: HboneMetrics | undefined;
  keepalive: KeepaliveTiming;
  streamWindows: StreamWindowMode;
}

/** One authenticated HTTP/2 session on an HBONE listener and the CONNECT streams on it. */
export class InboundSession {
  readonly peerIdentity: string;
  readonly closed: Promise<void>;
  readonly #session: H2Connection;
  readonly #deps: InboundSessionDeps;
  /** Uploads arrive here: their windows share one budget (absent when `fixed`). */
  readonly #windows: StreamWindows | undefined;

  constructor(session: H2Connection, peerIdentity: string, deps: InboundSessionDeps) {
    this.#session = session;
    this.peerIdentity = peerIdentity;
    this.#deps = deps;
    this.#windows = deps.streamWindows === 'shared' ? new StreamWindows(session) : undefined;
    deps.hboneMetrics?.inboundSessions.inc();
    // A peer that stops reading (a slow reader) never answers PING: this is its deadline.
    const stopKeepalive = startKeepalive(session, deps.keepalive, () => {
      const address = session.socket.remoteAddress ?? 'unknown';
      const error = new ZmeshError('ZM_ERR_HBONE_SESSION', { address, reason: 'ping timeout' });
      countError(deps.metrics, error);
      log.info({ peer: peerIdentity, code: error.code, err: error.message }, 'ping timeout, closing session');
      session.destroy();
    });
    session.on('error', (e: Error) => log.debug({ peer: peerIdentity, err: e.message }, 'session error'));
    // Every HTTP/2 error the peer caused, stream-level ones included, is logged and counted.
    session.on('protocolError', (e: ZmeshError) => {
      countError(deps.metrics, e);
      log.info({ peer: peerIdentity, code: e.code, err: e.message }, 'peer broke HTTP/2');
    });
    // Floods (rapid reset included) are counted by H2Connection as frames are read, which
    // sends GOAWAY ENHANCE_YOUR_CALM and ends the session; here they are only counted by kind.
    session.on('flood', (kind: string, e: ZmeshError) => {
      deps.hboneMetrics?.floods.inc({ kind });
      log.warn({ peer: peerIdentity, kind, code: e.code, err: e.message }, 'HTTP/2 flood, session closed');
    });
    session.on('stream', (stream: H2Stream, headers: H2Headers) => this.#onStream(stream, headers));
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

  #onStream(stream: H2Stream, headers: H2Headers): void {
    const hm = this.#deps.hboneMetrics;
    hm?.inboundStreams.inc();
    this.#windows?.track(stream);
    stream.on('error', (e) => log.debug({ peer: this.peerIdentity, err: e.message }, 'stream error'));
    stream.on('close', () => hm?.inboundStreams.dec());
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
    // The dial waits for the rest of this read: a RST_STREAM later in the same batch (or the
    // GOAWAY of a reset flood) is seen first, so a reset stream costs no upstream connect.
    setImmediate(() => this.#dial(stream, request));
  }

  #dial(stream: H2Stream, request: TunnelRequest): void {
    if (this.#session.destroyed || stream.destroyed || stream.rstCode !== undefined) return;
    // new Promise: an onTunnel that throws synchronously is a refusal, not a crash.
    new Promise<TunnelAccept>((resolve) => resolve(this.#deps.onTunnel(request))).then(
      (accept) => this.#accept(stream, accept),
      (e: unknown) => this.#refuse(stream, asZmeshError(e)),
    );
  }

  #accept(stream: H2Stream, accept: TunnelAccept): void {
    if (stream.destroyed || stream.closed) {
      accept.upstream.destroy();
      return;
    }
    stream.respond({ ':status': 200 });
    if (accept.copy) accept.copy(stream, accept.upstream);
    else spliceTunnel(stream, accept.upstream);
  }

  #refuse(stream: H2Stream, error: ZmeshError): void {
    countError(this.#deps.metrics, error);
    log.debug({ peer: this.peerIdentity, code: error.code, err: error.message }, 'tunnel refused');
    if (stream.destroyed || stream.closed || stream.headersSent) return;
    stream.respond({ ':status': error.status, 'x-zmesh-error': error.code }, { endStream: true });
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
