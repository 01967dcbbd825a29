import * as http from 'node:http';
import * as http2 from 'node:http2';
import type { Duplex } from 'node:stream';
import { isPrematureReset, logger, PrematureResets, ZmeshError } from '@zmesh/shared';
import type { WaypointMetrics } from '../telemetry/waypoint-metrics.js';
import {
  type Exchange,
  exchangeOf,
  replyError,
  type UpgradeRequest,
  upgradeProtocols,
} from './http-exchange.js';
import { type HandlerDeps, handleRequest, type TunnelContext } from './request-handler.js';

const log = logger('waypoint');

/** RFC 9110 leaves the limit to us; Envoy's default max_request_headers_kb is 60, Node's 16 KiB. */
const MAX_HEADER_BYTES = 16 * 1024;
const MAX_HEADER_PAIRS = 100;
/** A client that has not sent full headers by then is cut (slowloris). */
const HEADERS_TIMEOUT_MS = 10_000;
/** An idle downstream HTTP/1.1 keep-alive connection is closed after this. */
const KEEPALIVE_TIMEOUT_MS = 60_000;

/**
 * HTTP/1.1 and HTTP/2 (prior knowledge) servers that never listen: each tunnel's bytes are
 * handed over with emit('connection', duplex), which Node's servers accept for any Duplex.
 * Malformed requests are answered 400 and counted, and only their own connection ends.
 */
export class HttpFrontend {
  readonly #h1: http.Server;
  readonly #h2: http2.Http2Server;
  readonly #contexts = new WeakMap<object, TunnelContext>();
  /** Downstream HTTP/1.1 responses not yet finished, and HTTP/2 sessions: what a drain closes. */
  readonly #inFlight = new Set<http.ServerResponse>();
  readonly #h2Sessions = new Set<http2.ServerHttp2Session>();
  #draining = false;
  #pending: TunnelContext | undefined;

  constructor(
    private readonly deps: HandlerDeps,
    private readonly metrics: WaypointMetrics,
  ) {
    this.#h1 = http.createServer({
      maxHeaderSize: MAX_HEADER_BYTES,
      headersTimeout: HEADERS_TIMEOUT_MS,
      requestTimeout: 0,
      keepAliveTimeout: KEEPALIVE_TIMEOUT_MS,
      insecureHTTPParser: false,
      // Checked in #onRequest instead, so that the refusal is counted like every other.
      requireHostHeader: false,
    });
    this.#h1.on('request', (req, res) => this.#onRequest('h1', this.#contexts.get(req.socket), req, res));
    this.#h1.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) =>
      this.#onUpgrade(req, socket, head),
    );
    this.#h1.on('clientError', (e: Error & { code?: string }, socket: Duplex) =>
      this.#onClientError(e, socket),
    );
    this.#h2 = http2.createServer({
      maxHeaderListPairs: MAX_HEADER_PAIRS,
      maxSessionInvalidFrames: 100,
      maxSessionRejectedStreams: 100,
      settings: { maxHeaderListSize: MAX_HEADER_BYTES, maxConcurrentStreams: 200, enablePush: false },
    });
    this.#h2.on('session', (s) => this.#onH2Session(s));
    this.#h2.on('request', (req, res) =>
      this.#onRequest('h2', this.#contexts.get(req.stream.session as object), req, res),
    );
  }

  serve(protocol: 'h1' | 'h2', duplex: Duplex, ctx: TunnelContext): void {
    if (protocol === 'h1') {
      this.#contexts.set(duplex, ctx);
      this.#h1.emit('connection', duplex);
      // Detection paused the stream; a 'data' listener alone does not undo an explicit pause.
      duplex.resume();
      return;
    }
    // The h2 server creates the session (and emits 'session') synchronously in here.
    this.#pending = ctx;
    try {
      this.#h2.emit('connection', duplex);
      duplex.resume();
    } finally {
      this.#pending = undefined;
    }
  }

  /**
   * Graceful: every connection ends after the requests it has in flight. Idle HTTP/1.1
   * connections close now, busy ones answer their current request with `Connection: close`,
   * HTTP/2 sessions get GOAWAY and keep their open streams (Node's session.close()).
   */
  drain(): void {
    this.#draining = true;
    this.#h1.closeIdleConnections();
    for (const res of this.#inFlight) if (!res.headersSent) res.shouldKeepAlive = false;
    for (const s of this.#h2Sessions) if (!s.closed && !s.destroyed) s.close();
  }

  close(): void {
    this.#h1.closeAllConnections();
    for (const s of this.#h2Sessions) s.destroy();
  }

  #onRequest(
    protocol: 'h1' | 'h2',
    ctx: TunnelContext | undefined,
    req: http.IncomingMessage | http2.Http2ServerRequest,
    res: http.ServerResponse | http2.Http2ServerResponse,
  ): void {
    if (!ctx) {
      res.destroy();
      return;
    }
    const ex = exchangeOf(protocol, req, res, this.deps.pathNormalization);
    if (this.#refused(ex)) return;
    if (protocol === 'h1') {
      const h1 = res as http.ServerResponse;
      if (this.#draining) h1.shouldKeepAlive = false;
      this.#inFlight.add(h1);
      h1.once('close', () => this.#inFlight.delete(h1));
    }
    void handleRequest(this.deps, ctx, ex);
  }

  /**
   * A request that cannot be read one way only is answered 400 and counted, and its HTTP/1.1
   * connection closes: a missing or repeated Host (RFC 9112 §3.2), a request target or path
   * refused by request-target.ts, framing that `Connection` would strip, an upgrade to h2c
   * (refused, as Envoy does by default) or an upgrade request with a body.
   */
  #refused(ex: Exchange): boolean {
    const protocol = ex.protocol === 'h1' ? 'http1' : 'http2';
    let refusal = ex.refused;
    if (
      !refusal &&
      ex.protocol === 'h1' &&
      (ex.authority === '' ||
        ex.req.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === 'host').length !== 1)
    )
      refusal = { reason: 'host', detail: 'exactly one Host header is required' };
    if (!refusal && ex.upgrade) {
      if (upgradeProtocols(ex.header('upgrade')).includes('h2c'))
        refusal = { reason: 'h2c_upgrade', detail: 'upgrade to h2c is not served' };
      else if (
        ex.header('transfer-encoding') !== undefined ||
        Number(ex.header('content-length') ?? '0') !== 0
      )
        refusal = { reason: 'upgrade_body', detail: 'an upgrade request with a body' };
    }
    if (!refusal) return false;
    this.metrics.badRequests.inc({ protocol, reason: refusal.reason });
    log.info(
      {
        reason: refusal.reason,
        detail: refusal.detail,
        method: ex.method,
        authority: ex.authority.slice(0, 256),
      },
      'request refused',
    );
    replyError(
      ex,
      new ZmeshError('ZM_ERR_WAYPOINT_BAD_REQUEST', { reason: refusal.detail }),
      ex.protocol === 'h1' ? { connection: 'close' } : {},
    );
    return true;
  }

  /**
   * HTTP/1.1 Upgrade: the same pipeline (policy, route, limits) with a ServerResponse bound to
   * the socket for replies. The forwarder splices the socket to the endpoint only once the app
   * has answered 101; otherwise (`keepParsing`) the socket is handed back to the HTTP server,
   * bytes already read first, and its next request is judged like any other. After a local
   * reply the connection closes.
   */
  #onUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
    const ctx = this.#contexts.get(socket);
    if (!ctx) {
      socket.destroy();
      return;
    }
    // Nothing is read from the client until the app has decided.
    socket.pause();
    const res = new http.ServerResponse(req);
    res.assignSocket(socket as unknown as import('node:net').Socket);
    res.shouldKeepAlive = false;
    const upgrade: UpgradeRequest = { socket, head, keepParsing: false };
    res.once('finish', () => {
      res.detachSocket(socket as unknown as import('node:net').Socket);
      if (!upgrade.keepParsing || socket.destroyed) {
        socket.end();
        return;
      }
      if (head.length > 0) socket.unshift(head);
      this.serve('h1', socket, ctx);
    });
    const ex = { ...exchangeOf('h1', req, res, this.deps.pathNormalization), upgrade };
    if (this.#refused(ex)) return;
    void handleRequest(this.deps, ctx, ex);
  }

  #onClientError(e: Error & { code?: string }, socket: Duplex): void {
    const reason = (e.code ?? 'unknown').replace(/^HPE_/, '').toLowerCase();
    this.metrics.badRequests.inc({ protocol: 'http1', reason });
    log.info({ reason, err: e.message }, 'malformed HTTP/1.1 request refused');
    const inFlight = (socket as Duplex & { _httpMessage?: http.ServerResponse })._httpMessage;
    if (socket.writable && !inFlight?.headersSent && e.code !== 'ECONNRESET') {
      const body = `ZM_ERR_WAYPOINT_BAD_REQUEST: ${reason}`;
      socket.end(
        `HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: ${body.length}\r\nx-zmesh-error: ZM_ERR_WAYPOINT_BAD_REQUEST\r\nconnection: close\r\n\r\n${body}`,
      );
      // A body still arriving must not keep the connection (or the tunnel) open.
      setTimeout(() => socket.destroy(), 1000).unref();
      return;
    }
    socket.destroy();
  }

  #onH2Session(session: http2.ServerHttp2Session): void {
    this.#h2Sessions.add(session);
    session.once('close', () => this.#h2Sessions.delete(session));
    if (this.#draining) queueMicrotask(() => session.close());
    const ctx = this.#pending;
    if (ctx) this.#contexts.set(session, ctx);
    session.on('error', (e) => {
      this.metrics.badRequests.inc({ protocol: 'http2', reason: 'session_error' });
      log.info({ err: e.message }, 'downstream h2 session error');
    });
    // Rapid reset (CVE-2023-44487) by the HBONE server's rule (PrematureResets: Envoy's
    // premature resets, in a window and as a share of the streams that ended). An unanswered
    // stream closes only by a reset: the client's, or ours for a client already gone.
    const resets = new PrematureResets();
    session.on('stream', (stream) => {
      const openedAt = Date.now();
      stream.once('close', () => {
        if (session.destroyed) return;
        const breach =
          stream.rstCode !== undefined && isPrematureReset(stream.headersSent, openedAt)
            ? resets.reset()
            : undefined;
        resets.streamEnded();
        if (!breach) return;
        this.metrics.badRequests.inc({ protocol: 'http2', reason: 'rapid_reset' });
        log.warn({ err: breach.message }, 'rapid reset: closing the downstream h2 connection');
        session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
        session.destroy();
      });
    });
  }
}
