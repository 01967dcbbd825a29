import * as http from 'node:http';
import * as http2 from 'node:http2';
import type { Duplex } from 'node:stream';
import { logger, type OpenTunnelRequest, spiffeIdOf, ZmeshError } from '@zmesh/shared';
import type { Endpoint } from '../config/config-view.js';
import type { TunnelPool } from './tunnel-pool.js';

const log = logger('waypoint');

/** HTTP/2 sessions to one endpoint from one downstream connection. */
const MAX_H2_SESSIONS_PER_ENDPOINT = 4;
/** Streams on one upstream HTTP/2 session before another is opened. */
const MAX_STREAMS_PER_H2_SESSION = 100;
/** Idle HTTP/1.1 upstream connections kept per endpoint per downstream connection. */
const MAX_FREE_H1_SOCKETS = 2;
/** HTTP/1.1 upstream connections per endpoint per downstream connection (one request in flight each). */
const MAX_H1_SOCKETS = 8;
const UPSTREAM_IDLE_MS = 15_000;
/** An idle upstream connection ended with END_STREAM is destroyed if the app has not closed its side by then. */
const END_GRACE_MS = 5_000;

export interface UpstreamDeps {
  tunnels: TunnelPool;
  hbonePort: number;
  /** Tunnel headers for this downstream connection (forwarded, baggage, traceparent). */
  tunnelHeaders: Omit<OpenTunnelRequest, 'authority'>;
}

/** Counts a backend's open connections for its circuit breaker (max_connections). */
export interface ConnectionCounter {
  readonly name: string;
  readonly connectionLimit: number;
  readonly pendingLimit: number;
  /** False when the backend is at max_connections. */
  tryOpenConnection(): boolean;
  connectionClosed(): void;
  /** Counts a connection being set up (its request waits) against max_pending_requests. */
  admitPending(): { ok: true; release: () => void } | { ok: false };
}

interface H2Entry {
  ready: Promise<http2.ClientHttp2Session>;
  session?: http2.ClientHttp2Session;
  /** Streams reserved on this session, counted from reservation (before it is up). */
  active: number;
  /** Closed or GOAWAY received: no new streams. */
  dead: boolean;
}

/**
 * The upstream HTTP connections of one downstream connection. Each rides its own HBONE
 * tunnel to the endpoint's ztunnel, opened with the waypoint's identity and carrying
 * `forwarded: for=<original source>`; because that header belongs to one source, upstream
 * connections are reused by the requests of one downstream connection only and closed
 * with it. Requests are written with node:http / node:http2 directly over the tunnel
 * (createConnection) rather than http2-wrapper's proxy agents: those dial a proxy URL
 * themselves, while here the tunnel must come from our HBONE pool with a per-endpoint
 * expected SPIFFE identity and per-source headers.
 */
export class UpstreamSet {
  readonly #agents = new Map<string, http.Agent>();
  readonly #h2 = new Map<string, H2Entry[]>();
  #closed = false;

  constructor(private readonly deps: UpstreamDeps) {}

  /** Pools are per backend and endpoint, as Envoy's are per cluster, so each breaker counts its own. */
  agent(endpoint: Endpoint, counter: ConnectionCounter): http.Agent {
    const key = `${counter.name}|${endpoint.key}`;
    let agent = this.#agents.get(key);
    if (!agent) {
      agent = new TunnelAgent(() => this.#tunnel(endpoint, counter));
      this.#agents.set(key, agent);
    }
    return agent;
  }

  /**
   * A stream slot on an upstream HTTP/2 session to `endpoint`. The slot is reserved before
   * the session exists, so a burst of requests opens ceil(burst / streams) sessions, not one each.
   */
  async h2Session(
    endpoint: Endpoint,
    counter: ConnectionCounter,
  ): Promise<{ session: http2.ClientHttp2Session; done: () => void }> {
    const key = `${counter.name}|${endpoint.key}`;
    const list = this.#h2.get(key) ?? [];
    this.#h2.set(key, list);
    let entry = list.find((e) => !e.dead && e.active < MAX_STREAMS_PER_H2_SESSION);
    if (!entry) {
      if (list.length >= MAX_H2_SESSIONS_PER_ENDPOINT)
        throw new ZmeshError('ZM_ERR_WAYPOINT_OVERFLOW', {
          what: `h2 sessions to ${endpoint.key}`,
          limit: MAX_H2_SESSIONS_PER_ENDPOINT,
        });
      entry = this.#openH2(endpoint, counter, list);
    }
    const e = entry;
    e.active++;
    let finished = false;
    const done = () => {
      if (!finished) e.active--;
      finished = true;
    };
    try {
      return { session: await e.ready, done };
    } catch (err) {
      done();
      throw err;
    }
  }

  #openH2(endpoint: Endpoint, counter: ConnectionCounter, list: H2Entry[]): H2Entry {
    const entry: H2Entry = { active: 0, dead: false, ready: Promise.resolve(undefined as never) };
    const remove = () => {
      entry.dead = true;
      const i = list.indexOf(entry);
      if (i >= 0) list.splice(i, 1);
    };
    entry.ready = this.#tunnel(endpoint, counter).then(
      (tunnel) => {
        const session = http2.connect(`http://${endpoint.key}`, { createConnection: () => tunnel });
        session.on('error', (e) =>
          log.debug({ endpoint: endpoint.key, err: e.message }, 'upstream h2 session error'),
        );
        session.setTimeout(UPSTREAM_IDLE_MS, () => session.close());
        session.once('close', remove);
        session.once('goaway', () => {
          entry.dead = true;
        });
        if (this.#closed) session.destroy();
        entry.session = session;
        return session;
      },
      (e: unknown) => {
        remove();
        throw e;
      },
    );
    entry.ready.catch(() => {});
    list.push(entry);
    return entry;
  }

  /** A raw tunnel to `endpoint` (an HTTP/1.1 Upgrade carries its own bytes after the head). */
  rawTunnel(endpoint: Endpoint, counter: ConnectionCounter): Promise<Duplex> {
    return this.#tunnel(endpoint, counter);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const a of this.#agents.values()) {
      for (const s of Object.values(a.freeSockets).flat()) if (s) endIdle(s);
      a.destroy();
    }
    for (const list of this.#h2.values())
      for (const e of list) {
        const session = e.session;
        if (!session) continue;
        if (e.active > 0) {
          session.destroy();
          continue;
        }
        // Idle: GOAWAY and END_STREAM, then the peer closes (node:http2 ends its socket after a
        // graceful close and waits); destroyed only if it has not by END_GRACE_MS (see endIdle).
        const timer = setTimeout(() => session.destroy(), END_GRACE_MS);
        timer.unref();
        session.once('close', () => clearTimeout(timer));
        session.close();
      }
  }

  async #tunnel(endpoint: Endpoint, counter: ConnectionCounter): Promise<Duplex> {
    if (this.#closed)
      throw new ZmeshError('ZM_ERR_WAYPOINT_UPSTREAM', {
        endpoint: endpoint.key,
        reason: 'downstream closed',
      });
    const pending = counter.admitPending();
    if (!pending.ok)
      throw new ZmeshError('ZM_ERR_WAYPOINT_OVERFLOW', {
        what: `${counter.name} max_pending_requests`,
        limit: counter.pendingLimit,
      });
    if (!counter.tryOpenConnection()) {
      pending.release();
      throw new ZmeshError('ZM_ERR_WAYPOINT_OVERFLOW', {
        what: `${counter.name} max_connections`,
        limit: counter.connectionLimit,
      });
    }
    let tunnel: Duplex;
    try {
      tunnel = await this.deps.tunnels.open(
        {
          address: endpoint.address,
          hbonePort: this.deps.hbonePort,
          identity: spiffeIdOf(endpoint.workload),
        },
        { ...this.deps.tunnelHeaders, authority: endpoint.key },
      );
    } catch (e) {
      counter.connectionClosed();
      throw e;
    } finally {
      pending.release();
    }
    tunnel.once('close', () => counter.connectionClosed());
    return tunnel;
  }
}

/**
 * An http.Agent whose connections are HBONE tunnels. Agent supports an asynchronous
 * createConnection(options, callback); the socket-only calls it makes on kept-alive
 * connections (setKeepAlive, ref/unref) are no-op shims because a tunnel is an HTTP/2 stream.
 */
class TunnelAgent extends http.Agent {
  constructor(private readonly open: () => Promise<Duplex>) {
    super({
      keepAlive: true,
      maxSockets: MAX_H1_SOCKETS,
      maxFreeSockets: MAX_FREE_H1_SOCKETS,
      timeout: UPSTREAM_IDLE_MS,
    });
  }

  override createConnection(
    _options: http.ClientRequestArgs,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): Duplex | null | undefined {
    this.open().then(
      (tunnel) => callback?.(null, withSocketShims(tunnel)),
      (e: Error) => callback?.(e, undefined as never),
    );
    return undefined;
  }

  override keepSocketAlive(socket: Duplex & { setTimeout?: (ms: number) => void }): boolean {
    socket.setTimeout?.(UPSTREAM_IDLE_MS);
    return true;
  }
  // reuseSocket is Agent's own: it removes the 'error' listener Agent put on the socket
  // when it was freed (an empty override leaked one listener per reuse) and calls ref(),
  // which the shims below provide.
}

/**
 * Ends an idle kept-alive upstream connection as TCP would (END_STREAM; the app closes its
 * side and the HBONE stream closes with no RST_STREAM) instead of resetting it: a reset per
 * closed downstream connection is a reset per client connection at the endpoint's ztunnel,
 * whose rapid-reset guard (CVE-2023-44487: 100 a second) then closes the whole HBONE
 * session, and the requests on it fail. A request in flight is still cancelled by reset.
 */
function endIdle(socket: Duplex): void {
  const timer = setTimeout(() => socket.destroy(), END_GRACE_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  socket.on('error', () => {});
  socket.resume();
  socket.end();
  // Out of the agent, so its destroy() below leaves it be (Agent.removeSocket takes a socket
  // out of the free list only once it is no longer writable: after end()).
  socket.emit('agentRemove');
}

export function withSocketShims(d: Duplex): Duplex {
  const s = d as Duplex & Record<string, unknown>;
  for (const name of ['setKeepAlive', 'setNoDelay', 'ref', 'unref'])
    if (typeof s[name] !== 'function') s[name] = () => s;
  return d;
}
