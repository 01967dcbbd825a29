import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { ZmeshError } from '../errors/index.js';
import { logger } from '../log/index.js';
import { buildConnectHeaders } from './connect-request.js';
import type { H2Connection } from './h2/h2-connection.js';
import type { H2Headers, H2Stream } from './h2/h2-stream.js';
import type { KeepaliveTiming, StreamWindowMode } from './hbone-settings.js';
import { startKeepalive } from './keepalive.js';
import { StreamWindows } from './stream-windows.js';

const log = logger('hbone');

export interface OpenTunnelRequest {
  /** `ip:port` or `[ipv6]:port` of the destination (docs/design.md §3, "Leaving the source pod"). */
  authority: string;
  forwardedFor?: string;
  baggage?: Record<string, string>;
  traceparent?: string;
}

/**
 * A client HBONE session: one mTLS HTTP/2 connection carrying CONNECT tunnels.
 * Events: 'goaway' (code, lastStreamId, data) — no new tunnels, open ones go on;
 * 'idle' — activeStreams fell to 0; 'close' — the connection is gone.
 */
export class HboneSession extends EventEmitter {
  readonly peerIdentity: string;
  readonly address: string;
  /** Bound on concurrent tunnels here; the pool opens another session beyond it. */
  readonly maxStreams: number;
  readonly #session: H2Connection;
  /** Responses and downloads arrive here: their windows share one budget (absent when `fixed`). */
  readonly #windows: StreamWindows | undefined;
  #active = 0;
  #closed = false;
  #draining = false;

  constructor(
    session: H2Connection,
    opts: {
      peerIdentity: string;
      address: string;
      keepalive: KeepaliveTiming;
      maxStreams: number;
      streamWindows?: StreamWindowMode;
    },
  ) {
    super();
    this.#session = session;
    this.peerIdentity = opts.peerIdentity;
    this.address = opts.address;
    this.maxStreams = opts.maxStreams;
    this.#windows = opts.streamWindows === 'fixed' ? undefined : new StreamWindows(session);
    const stopKeepalive = startKeepalive(session, opts.keepalive, () => {
      log.info({ address: this.address }, 'ping timeout, closing session');
      session.destroy(
        new ZmeshError('ZM_ERR_HBONE_SESSION', { address: this.address, reason: 'ping timeout' }),
      );
    });
    session.on('error', (e: Error) => log.debug({ address: this.address, err: e.message }, 'session error'));
    session.on('protocolError', (e: Error) =>
      log.info({ address: this.address, err: e.message }, 'peer broke HTTP/2'),
    );
    session.on('goaway', (code: number, last: number, data?: Buffer) => {
      this.#draining = true;
      this.emit('goaway', code, last, data);
    });
    session.once('close', () => {
      this.#closed = true;
      stopKeepalive();
      this.emit('close');
    });
  }

  get activeStreams(): number {
    return this.#active;
  }

  get closed(): boolean {
    return this.#closed || this.#session.destroyed;
  }

  /** GOAWAY received (or close() called): usable for open tunnels, not for new ones. */
  get draining(): boolean {
    return this.#draining || this.#session.closed || this.#session.goawayReceived;
  }

  get hasCapacity(): boolean {
    return !this.closed && !this.draining && this.#active < this.maxStreams;
  }

  /**
   * Sends CONNECT and resolves with the tunnel once the server answers 200. The tunnel is
   * the HTTP/2 stream: write to send, end() half-closes (END_STREAM), 'end' is the peer's.
   */
  openTunnel(req: OpenTunnelRequest): Promise<Duplex> {
    const refused = this.#refusal();
    if (refused !== undefined) return Promise.reject(this.#error(refused));
    let stream: H2Stream;
    try {
      stream = this.#session.request(buildConnectHeaders(req), { endStream: false });
    } catch (e) {
      return Promise.reject(this.#error((e as Error).message, e));
    }
    this.#active++;
    this.#windows?.track(stream);
    let released = false;
    // A refused stream stops counting at once, not when its close is flushed a tick later.
    const release = () => {
      if (released) return;
      released = true;
      this.#active--;
      if (this.#active === 0) this.emit('idle');
    };
    stream.on('close', release); // emitted once: no once() wrapper per tunnel
    return new Promise((resolve, reject) => {
      const onEarlyClose = () =>
        reject(
          this.#error(`stream closed before response (code ${stream.rstCode})`, undefined, stream.rstCode),
        );
      const onError = (e: Error) => reject(this.#error(e.message, e, stream.rstCode));
      stream.once('close', onEarlyClose);
      stream.once('error', onError);
      stream.once('response', (headers: H2Headers) => {
        stream.off('close', onEarlyClose).off('error', onError);
        const status = Number(headers[':status']);
        if (status === 200) return resolve(stream);
        // The server has ended its side; ending ours closes the stream with NO_ERROR
        // rather than a reset, which a server may count against us (rapid reset).
        stream.on('error', () => {});
        stream.resume();
        stream.end();
        release();
        const code = headers['x-zmesh-error'];
        reject(new ZmeshError('ZM_ERR_HBONE_TUNNEL_REFUSED', { authority: req.authority, status, code }));
      });
    });
  }

  /** Graceful: no new tunnels, GOAWAY to the server, the connection ends with the last tunnel. */
  close(): void {
    if (!this.#session.closed && !this.#session.destroyed) this.#session.close();
  }

  /** Immediate: every tunnel is reset. */
  destroy(error?: Error): void {
    if (!this.#session.destroyed) this.#session.destroy(error);
  }

  #refusal(): string | undefined {
    if (this.closed) return 'session closed';
    if (this.draining) return 'session draining';
    if (this.#active >= this.maxStreams) return `stream limit ${this.maxStreams} reached`;
    return undefined;
  }

  #error(reason: string, cause?: unknown, rstCode?: number): ZmeshError {
    return new ZmeshError('ZM_ERR_HBONE_SESSION', { address: this.address, reason, rstCode }, { cause });
  }
}
