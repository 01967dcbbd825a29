import type { Duplex } from 'node:stream';
import {
  guardedTimeout,
  type HboneSession,
  isZmeshError,
  logger,
  type MeshMetrics,
  ZmeshError,
} from '@zmesh/shared';

const log = logger('pool');

/**
 * A connection is reused only when the whole key matches (docs/design.md §7): sharing across tenants or
 * identities would let one tenant's traffic ride (and be attributed to) another's mTLS session.
 */
export interface PoolKey {
  tenant: string;
  sourceIdentity: string;
  destinationIdentity: string;
  /** Where the session is dialled, `host:port`. */
  destinationAddress: string;
  /**
   * The source workload's address the session is bound to, so the destination sees the
   * real source IP for IP-based policy; workloads sharing an identity never share a session.
   */
  sourceAddress?: string;
}

export interface TunnelHeaders {
  authority: string;
  forwardedFor?: string;
  baggage?: Record<string, string>;
  traceparent?: string;
}

export interface HbonePoolOptions {
  /** Opens one HBONE session for a key (TLS with the source identity's credential). */
  connect: (key: PoolKey) => Promise<HboneSession>;
  /** docs/design.md §4: a client opens at most 100 streams per connection. */
  maxStreamsPerConnection?: number;
  /** An unused connection is closed after this long. */
  idleTimeoutMs?: number;
  metrics?: MeshMetrics;
}

const DEFAULT_MAX_STREAMS_PER_CONNECTION = 100;
const DEFAULT_IDLE_TIMEOUT_MS = 30_000;

interface Entry {
  id: number;
  /** Settles once the session is up; rejected entries are removed at once. */
  ready: Promise<HboneSession>;
  session?: HboneSession;
  /** Streams assigned to this connection, counted from the moment of assignment (before the
   * session is up), so a burst of N opens exactly ceil(N / max) connections. */
  reserved: number;
  idleTimer?: NodeJS.Timeout;
  retired: boolean;
}

/** HBONE connection pool: per-key connections, each carrying at most `maxStreams` streams. */
export class HbonePool {
  private readonly entries = new Map<string, Entry[]>();
  private readonly maxStreams: number;
  private readonly idleTimeoutMs: number;
  private nextId = 1;
  private closed = false;

  constructor(private readonly options: HbonePoolOptions) {
    this.maxStreams = options.maxStreamsPerConnection ?? DEFAULT_MAX_STREAMS_PER_CONNECTION;
    this.idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  }

  /**
   * Opens a tunnel on a pooled connection for `key`, opening a connection when all are
   * full. A stream the server refused unprocessed (REFUSED_STREAM after its GOAWAY, RFC
   * 9113 §8.7) is retried once on another connection: nothing reached the upstream.
   */
  async openTunnel(key: PoolKey, headers: TunnelHeaders): Promise<Duplex> {
    try {
      return await this.openOnce(key, headers);
    } catch (e) {
      if (!isRefusedUnprocessed(e) || this.closed) throw e;
      log.debug({ key: keyString(key) }, 'stream refused after GOAWAY: retrying once');
      return this.openOnce(key, headers);
    }
  }

  private async openOnce(key: PoolKey, headers: TunnelHeaders): Promise<Duplex> {
    if (this.closed)
      throw new ZmeshError('ZM_ERR_HBONE_SESSION', {
        address: key.destinationAddress,
        reason: 'pool closed',
      });
    const entry = this.reserve(key);
    let tunnel: Duplex;
    try {
      const session = await entry.ready;
      tunnel = await session.openTunnel(headers);
    } catch (e) {
      if (isRefusedUnprocessed(e)) this.retire(keyString(key), entry);
      this.release(key, entry);
      throw e;
    }
    tunnel.on('close', () => this.release(key, entry)); // once per stream; no once() wrapper
    return tunnel;
  }

  /** Connections per key, for tests and /config_dump. */
  stats(): Array<{ key: string; connections: Array<{ id: number; streams: number; up: boolean }> }> {
    return [...this.entries].map(([key, list]) => ({
      key,
      connections: list.map((e) => ({ id: e.id, streams: e.reserved, up: e.session !== undefined })),
    }));
  }

  connectionCount(): number {
    let n = 0;
    for (const list of this.entries.values()) n += list.length;
    return n;
  }

  /**
   * Stops new streams on every connection made with `sourceIdentity`'s certificate (a
   * rotated or expiring one); open tunnels run on until they end, then the connection
   * closes with GOAWAY (RFC 9113 §6.8). The next stream opens a connection with the
   * certificate held then. Returns how many connections were drained.
   */
  drainSource(sourceIdentity: string): number {
    let drained = 0;
    for (const [mapKey, list] of this.entries) {
      if (mapKey.split('|')[1] !== sourceIdentity) continue;
      // A connection still being set up may be waited on by its first stream; it is
      // drained by the 'expiring' of the certificate it used, if that was the old one.
      for (const e of list.filter((x) => x.session !== undefined)) {
        this.retire(mapKey, e);
        drained += 1;
      }
    }
    return drained;
  }

  /** Closes every connection; in-flight tunnels are reset. */
  close(): void {
    this.closed = true;
    for (const [mapKey, list] of this.entries) for (const e of [...list]) this.retire(mapKey, e);
  }

  private reserve(key: PoolKey): Entry {
    const mapKey = keyString(key);
    const list = this.entries.get(mapKey) ?? [];
    this.entries.set(mapKey, list);
    let entry = list.find((e) => !e.retired && e.reserved < this.maxStreams && !e.session?.draining);
    if (!entry) {
      entry = this.open(mapKey, key);
      list.push(entry);
    }
    entry.reserved += 1;
    if (entry.idleTimer) {
      clearTimeout(entry.idleTimer);
      entry.idleTimer = undefined;
    }
    return entry;
  }

  private open(mapKey: string, key: PoolKey): Entry {
    const entry: Entry = {
      id: this.nextId++,
      reserved: 0,
      retired: false,
      ready: Promise.resolve(undefined as never),
    };
    entry.ready = this.options.connect(key).then(
      (session) => {
        entry.session = session;
        this.options.metrics?.hboneSessions.inc({ state: 'client' });
        session.once('close', () => this.retire(mapKey, entry));
        if (entry.retired) session.close();
        log.debug({ key: mapKey, id: entry.id }, 'hbone connection up');
        return session;
      },
      (e: unknown) => {
        this.retire(mapKey, entry);
        throw e;
      },
    );
    // Callers observe the rejection through openTunnel; this keeps it from being "unhandled".
    entry.ready.catch(() => {});
    return entry;
  }

  private release(key: PoolKey, entry: Entry): void {
    entry.reserved -= 1;
    if (entry.reserved > 0 || entry.retired) return;
    const mapKey = keyString(key);
    entry.idleTimer = guardedTimeout('pool_idle', () => this.retire(mapKey, entry), this.idleTimeoutMs);
    entry.idleTimer.unref();
  }

  private retire(mapKey: string, entry: Entry): void {
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
    const list = this.entries.get(mapKey);
    const i = list?.indexOf(entry) ?? -1;
    if (list && i >= 0) {
      list.splice(i, 1);
      if (list.length === 0) this.entries.delete(mapKey);
    }
    if (entry.retired) return;
    entry.retired = true;
    if (entry.session) {
      this.options.metrics?.hboneSessions.dec({ state: 'client' });
      if (!entry.session.closed) entry.session.close();
    }
  }
}

/** NGHTTP2_REFUSED_STREAM: the server did not process the stream. */
const REFUSED_STREAM = 7;

function isRefusedUnprocessed(e: unknown): boolean {
  return isZmeshError(e, 'ZM_ERR_HBONE_SESSION') && e.context.rstCode === REFUSED_STREAM;
}

function keyString(k: PoolKey): string {
  return `${k.tenant}|${k.sourceIdentity}|${k.destinationIdentity}|${k.destinationAddress}|${k.sourceAddress ?? ''}`;
}
