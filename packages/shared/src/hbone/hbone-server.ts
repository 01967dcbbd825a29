import * as net from 'node:net';
import * as tls from 'node:tls';
import { ZmeshError } from '../errors/index.js';
import type { Credential } from '../identity/credential.js';
import type { TrustBundle } from '../identity/trust-bundle.js';
import { logger } from '../log/index.js';
import type { MeshMetrics } from '../metrics/index.js';
import { listenServer } from '../net/listen-server.js';
import { guardedTimeout } from '../runtime/guarded-task.js';
import { serverTlsOptions, verifyPeerIdentity } from '../tls/mtls.js';
import { type ConnectionGate, PreauthLimiter, type PreauthTicket } from './admission.js';
import type { H2FloodLimits } from './h2/flood-limits.js';
import { ErrorCode } from './h2/frame.js';
import { H2Connection } from './h2/h2-connection.js';
import type { H2Stream } from './h2/h2-stream.js';
import { countError, HboneMetrics, handshakeFailureOf } from './hbone-metrics.js';
import {
  CONNECTION_WINDOW_BYTES,
  DEFAULT_KEEPALIVE,
  DRAIN_GRACE_MS,
  HANDSHAKE_TIMEOUT_MS,
  type KeepaliveTiming,
  localSettings,
  RAPID_RESET_LIMIT,
  RAPID_RESET_WINDOW_MS,
  SERVER_MAX_CONCURRENT_STREAMS,
  type StreamWindowMode,
  TLS_CONTEXT_IDLE_MS,
} from './hbone-settings.js';
import { InboundSession, type TunnelAccept, type TunnelRequest } from './inbound-session.js';

const log = logger('hbone');

export interface HboneServerOptions {
  credential: Credential;
  bundle: TrustBundle;
  onTunnel: (req: TunnelRequest) => Promise<TunnelAccept>;
  metrics?: MeshMetrics;
  /** For logs only. */
  name?: string;
  keepalive?: KeepaliveTiming;
  rapidReset?: { limit: number; windowMs: number };
  /** HTTP/2 flood bounds (h2/flood-limits.ts); `rapidReset` sets the reset ones. */
  floodLimits?: Partial<H2FloodLimits>;
  /**
   * TLS, the HTTP/2 preface and the client's first SETTINGS must all arrive within this;
   * default HANDSHAKE_TIMEOUT_MS.
   */
  handshakeTimeoutMs?: number;
  /**
   * Bounds connections not yet authenticated; share one among every listener of a process.
   * Default: one of its own with the default limits.
   */
  preauth?: PreauthLimiter;
  /** Asked before each new connection (the process's fd reserve); may refuse it. */
  gate?: ConnectionGate;
  /** How long the TLS server is kept with no connection open; default TLS_CONTEXT_IDLE_MS. */
  tlsIdleMs?: number;
  /** How uploads' stream windows are sized; default `shared`. */
  streamWindows?: StreamWindowMode;
}

/**
 * The HBONE listener (docs/design.md §3 inbound, §4): TLS 1.3 + h2, client SVID required and in
 * our trust domain, CONNECT only. One per pod (ztunnel, on each of its addresses) or per
 * waypoint. Plain TCP listeners accept; the TLS server that takes each connection over is
 * built at the first one and dropped once none has been open for `tlsIdleMs`, so an idle
 * pod holds no OpenSSL context.
 */
export class HboneServer {
  readonly #opts: HboneServerOptions;
  readonly #listeners: net.Server[] = [];
  #tls: tls.Server | undefined;
  /** Set while no socket is open and the TLS server is kept: when it fires, the server goes. */
  #tlsIdle: NodeJS.Timeout | undefined;
  readonly #sessions = new Set<InboundSession>();
  /** Every accepted TCP socket, so close() also ends those still in (or stuck before) TLS. */
  readonly #sockets = new Set<net.Socket>();
  /** Connections accepted and not authenticated yet, by their 4-tuple (see `connectionKey`). */
  readonly #pending = new Map<string, PendingConnection>();
  readonly #preauth: PreauthLimiter;
  readonly #metrics: HboneMetrics | undefined;
  readonly #onBundleChange = () => this.#reloadContext();
  #credential: Credential;

  constructor(opts: HboneServerOptions) {
    this.#opts = opts;
    this.#credential = opts.credential;
    this.#metrics = opts.metrics ? HboneMetrics.for(opts.metrics.registry) : undefined;
    this.#preauth = opts.preauth ?? new PreauthLimiter();
    opts.bundle.on('change', this.#onBundleChange);
  }

  /** Listens on one more address (or inherited socket); every one presents the same identity. */
  async listen(
    opts: { host: string; port: number } | { fd: number },
  ): Promise<{ host: string; port: number }> {
    const listener = net.createServer((socket) => this.#accept(socket));
    this.#listeners.push(listener);
    await listenServer(listener, opts, {
      name: this.#opts.name ? `HBONE (${this.#opts.name})` : 'HBONE',
      onError: (e) => log.warn({ name: this.#opts.name, err: e.message }, 'hbone accept failed'),
    });
    const addr = listener.address() as net.AddressInfo;
    log.debug({ name: this.#opts.name, host: addr.address, port: addr.port }, 'hbone listening');
    return { host: addr.address, port: addr.port };
  }

  /** For tests: whether the TLS server (and its OpenSSL context) exists now. */
  hasTlsServer(): boolean {
    return this.#tls !== undefined;
  }

  /** New handshakes present `cred`; sessions already up keep the one they started with. */
  updateCredential(cred: Credential): void {
    this.#credential = cred;
    this.#reloadContext();
  }

  connectionCount(): number {
    return this.#sessions.size;
  }

  /**
   * Graceful shutdown: stop accepting, GOAWAY every session (RFC 9113 §6.8) so clients
   * open new streams elsewhere, let open streams finish for `graceMs`, then cut the rest.
   */
  async drain(graceMs = DRAIN_GRACE_MS): Promise<void> {
    const closed = this.#stopListening();
    for (const s of this.#sessions) s.drain();
    await Promise.race([this.#allSessionsClosed(), delay(graceMs)]);
    this.#destroyAll();
    await closed;
  }

  async close(): Promise<void> {
    const closed = this.#stopListening();
    this.#destroyAll();
    await closed;
  }

  #destroyAll(): void {
    for (const s of this.#sessions) s.destroy();
    for (const socket of this.#sockets) socket.destroy();
  }

  async #stopListening(): Promise<void> {
    this.#opts.bundle.off('change', this.#onBundleChange);
    clearTimeout(this.#tlsIdle);
    // Every listener, a paused one too (AcceptBackoff): its close() cancels the resume.
    // Closing one that is not listening calls back with ERR_SERVER_NOT_RUNNING: fine here.
    await Promise.all(
      this.#listeners.map((l) => new Promise((resolve) => l.close(() => resolve(undefined)))),
    );
  }

  async #allSessionsClosed(): Promise<void> {
    await Promise.all([...this.#sessions].map((s) => s.closed));
  }

  #reloadContext(): void {
    this.#tls?.setSecureContext(serverTlsOptions(this.#credential, this.#opts.bundle));
  }

  /**
   * Every accepted socket is owned from here to its close: refused at once when the process
   * is short of fds or the source (or everyone) holds too many unauthenticated connections,
   * else destroyed if TLS, preface and first SETTINGS do not finish within the deadline.
   */
  #accept(socket: net.Socket): void {
    const source = socket.remoteAddress ?? 'unknown';
    const refused = this.#opts.gate?.check(source);
    if (refused !== undefined) {
      this.#refuseConnection(socket, refused, 'fd_reserve');
      return;
    }
    const ticket = this.#preauth.admit(source);
    if (!ticket.ok) {
      const scope = (ticket.error.context as { scope?: string }).scope;
      this.#refuseConnection(socket, ticket.error, `preauth_${scope}`);
      return;
    }
    socket.setNoDelay(true); // as the client side: multiplexed small frames, no Nagle
    this.#sockets.add(socket);
    clearTimeout(this.#tlsIdle);
    this.#tlsIdle = undefined;
    const key = connectionKey(socket);
    const timeoutMs = this.#opts.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS;
    const pending: PendingConnection = {
      ticket: ticket.value,
      stage: 'tls',
      timer: guardedTimeout(
        'hbone_handshake_deadline',
        () => this.#handshakeExpired(socket, key, source, timeoutMs),
        timeoutMs,
      ),
    };
    pending.timer.unref();
    this.#pending.set(key, pending);
    this.#metrics?.preauthConnections.inc();
    // The key is taken now: a destroyed socket no longer knows its addresses.
    socket.once('close', () => {
      this.#authenticated(key);
      this.#sockets.delete(socket);
      if (this.#sockets.size === 0 && this.#tls !== undefined) this.#armTlsIdle();
    });
    this.#tlsServer().emit('connection', socket);
  }

  #refuseConnection(socket: net.Socket, error: ZmeshError, reason: string): void {
    this.#metrics?.refusedConnections.inc({ reason });
    countError(this.#opts.metrics, error);
    log.info({ name: this.#opts.name, code: error.code, err: error.message }, 'connection refused');
    socket.on('error', () => {});
    socket.destroy();
  }

  #handshakeExpired(socket: net.Socket, key: string, source: string, timeoutMs: number): void {
    const pending = this.#pending.get(key);
    const stage = pending?.stage ?? 'tls';
    const error = new ZmeshError('ZM_ERR_HBONE_HANDSHAKE_TIMEOUT', { source, timeoutMs, stage });
    this.#metrics?.handshakeFailures.inc({ reason: 'timeout' });
    pending?.onExpiry?.();
    this.#refuseConnection(socket, error, 'handshake_timeout');
  }

  /** The connection proved itself (or is gone): it leaves the pre-authentication bound. */
  #authenticated(key: string): void {
    const pending = this.#pending.get(key);
    if (pending === undefined) return;
    this.#pending.delete(key);
    clearTimeout(pending.timer);
    pending.ticket.release();
    this.#metrics?.preauthConnections.dec();
  }

  /** The TLS server that takes accepted sockets over; it never listens itself. */
  #tlsServer(): tls.Server {
    if (this.#tls !== undefined) return this.#tls;
    const server = tls.createServer({
      ...serverTlsOptions(this.#credential, this.#opts.bundle),
      // Our own deadline (#accept) covers TLS and the preface; Node's is only a backstop.
      handshakeTimeout: 2 * (this.#opts.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS),
    });
    server.on('secureConnection', (socket: tls.TLSSocket) => this.#onSecureConnection(socket));
    server.on('tlsClientError', (e, socket) => this.#onHandshakeError(e, socket));
    this.#tls = server;
    return server;
  }

  #armTlsIdle(): void {
    clearTimeout(this.#tlsIdle);
    this.#tlsIdle = guardedTimeout(
      'hbone_tls_idle',
      () => {
        this.#tlsIdle = undefined;
        if (this.#sockets.size === 0) this.#tls = undefined;
      },
      this.#opts.tlsIdleMs ?? TLS_CONTEXT_IDLE_MS,
    );
    this.#tlsIdle.unref();
  }

  /**
   * Node verifies the client chain after OpenSSL's handshake and then destroys the socket
   * without an alert, so the error is a bare ECONNRESET; the verdict is on the socket.
   */
  #onHandshakeError(e: Error, socket: tls.TLSSocket): void {
    const verdict = (socket.authorizationError as unknown as string | null) ?? undefined;
    const reason = handshakeFailureOf(verdict === undefined ? e : { code: verdict });
    this.#metrics?.handshakeFailures.inc({ reason });
    const detail = verdict ?? (e as { code?: string }).code ?? e.message;
    log.debug({ name: this.#opts.name, reason, err: detail }, 'handshake refused');
    // Node reports a failed or timed-out handshake here but leaves the socket open: a client
    // that never starts TLS would hold its fd for good (thousands exhaust the process).
    socket.destroy();
  }

  /** TLS is done: a TLS 1.3 client that negotiated no ALPN (or not h2) is not an HBONE client. */
  #onSecureConnection(socket: tls.TLSSocket): void {
    if (socket.alpnProtocol !== 'h2') {
      this.#metrics?.handshakeFailures.inc({ reason: 'protocol' });
      socket.destroy();
      return;
    }
    const rapid = this.#opts.rapidReset ?? { limit: RAPID_RESET_LIMIT, windowMs: RAPID_RESET_WINDOW_MS };
    const session = new H2Connection(socket, {
      role: 'server',
      settings: localSettings(SERVER_MAX_CONCURRENT_STREAMS),
      connectionWindow: CONNECTION_WINDOW_BYTES,
      floodLimits: { ...this.#opts.floodLimits, resets: rapid.limit, resetWindowMs: rapid.windowMs },
    });
    // TLS is done; the deadline runs on until the client's preface and first SETTINGS.
    const key = connectionKey(socket);
    const pending = this.#pending.get(key);
    if (pending !== undefined) {
      pending.stage = 'preface';
      pending.onExpiry = () => {
        session.destroy();
        socket.destroy();
      };
    }
    session.once('remoteSettings', () => this.#authenticated(key));
    const id = verifyPeerIdentity(socket, this.#opts.bundle.trustDomain);
    if (!id.ok) {
      refuseSession(session, id.error);
      countError(this.#opts.metrics, id.error);
      log.info({ name: this.#opts.name, code: id.error.code, err: id.error.message }, 'peer refused');
      return;
    }
    const inbound = new InboundSession(session, id.value, {
      onTunnel: this.#opts.onTunnel,
      metrics: this.#opts.metrics,
      hboneMetrics: this.#metrics,
      keepalive: this.#opts.keepalive ?? DEFAULT_KEEPALIVE,
      streamWindows: this.#opts.streamWindows ?? 'shared',
    });
    this.#sessions.add(inbound);
    void inbound.closed.then(() => this.#sessions.delete(inbound));
  }
}

/**
 * Ends a session whose peer passed TLS but not our identity rules. The error code rides in
 * GOAWAY's debug data (RFC 9113 §6.8) so the client can report why, not just "reset".
 */
function refuseSession(session: H2Connection, error: ZmeshError): void {
  session.on('error', () => {});
  session.on('stream', (stream: H2Stream) => stream.close(ErrorCode.REFUSED_STREAM));
  session.goaway(ErrorCode.INADEQUATE_SECURITY, 0, Buffer.from(error.code));
  session.close();
}

interface PendingConnection {
  ticket: PreauthTicket;
  timer: NodeJS.Timeout;
  /** What the deadline waits for: the TLS handshake, then the HTTP/2 preface and SETTINGS. */
  stage: 'tls' | 'preface';
  onExpiry?: () => void;
}

/**
 * The TLS socket wraps the accepted one and has the same addresses: the 4-tuple finds the
 * accepted connection's state again without reaching into Node's private fields.
 */
function connectionKey(socket: net.Socket): string {
  return `${socket.localAddress}|${socket.localPort}|${socket.remoteAddress}|${socket.remotePort}`;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
