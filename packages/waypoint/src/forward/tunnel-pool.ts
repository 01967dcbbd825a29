import type { Duplex } from 'node:stream';
import {
  type Credential,
  connectHbone,
  type HboneSession,
  logger,
  type OpenTunnelRequest,
  type TrustBundle,
  ZmeshError,
} from '@zmesh/shared';

const log = logger('waypoint');

/** Tunnels one HBONE connection carries before another is opened (docs/design.md §4: at most 100). */
const MAX_STREAMS_PER_SESSION = 100;
/** HBONE connections to one endpoint ztunnel; beyond this, opening a tunnel fails (UO). */
const MAX_SESSIONS_PER_HOST = 16;
const SESSION_IDLE_MS = 30_000;
/** TLS handshake + SETTINGS to an endpoint's ztunnel. */
const CONNECT_TIMEOUT_MS = 5_000;

export interface TunnelTarget {
  /** The endpoint's address; its ztunnel listens on `hbonePort` there. */
  address: string;
  hbonePort: number;
  /** The endpoint's SPIFFE ID: the ztunnel must present it (docs/design.md §4). */
  identity: string;
}

interface Entry {
  ready: Promise<HboneSession>;
  session?: HboneSession;
  reserved: number;
  idle?: NodeJS.Timeout;
  dead: boolean;
}

/**
 * HBONE connections from the waypoint (its own identity) to endpoint ztunnels, one key
 * per (address, expected identity), each carrying at most MAX_STREAMS_PER_SESSION tunnels.
 */
export class TunnelPool {
  readonly #entries = new Map<string, Entry[]>();
  #closed = false;

  constructor(
    private readonly deps: {
      credential: () => Credential;
      bundle: TrustBundle;
      idleMs?: number;
      connectTimeoutMs?: number;
    },
  ) {}

  async open(target: TunnelTarget, req: OpenTunnelRequest): Promise<Duplex> {
    const key = `${target.address}|${target.hbonePort}|${target.identity}`;
    if (this.#closed) throw new ZmeshError('ZM_ERR_HBONE_SESSION', { address: key, reason: 'pool closed' });
    const entry = this.#reserve(key, target);
    try {
      const session = await entry.ready;
      const tunnel = await session.openTunnel(req);
      tunnel.once('close', () => this.#release(key, entry));
      return tunnel;
    } catch (e) {
      this.#release(key, entry);
      throw e;
    }
  }

  sessionCount(): number {
    let n = 0;
    for (const list of this.#entries.values()) n += list.length;
    return n;
  }

  close(): void {
    this.#closed = true;
    for (const [key, list] of this.#entries) for (const e of [...list]) this.#retire(key, e);
  }

  #reserve(key: string, target: TunnelTarget): Entry {
    const list = this.#entries.get(key) ?? [];
    this.#entries.set(key, list);
    let entry = list.find((e) => !e.dead && e.reserved < MAX_STREAMS_PER_SESSION && !e.session?.draining);
    if (!entry) {
      if (list.length >= MAX_SESSIONS_PER_HOST)
        throw new ZmeshError('ZM_ERR_WAYPOINT_OVERFLOW', {
          what: `hbone sessions to ${target.address}`,
          limit: MAX_SESSIONS_PER_HOST,
        });
      entry = this.#connect(key, target);
      list.push(entry);
    }
    entry.reserved++;
    if (entry.idle) clearTimeout(entry.idle);
    entry.idle = undefined;
    return entry;
  }

  #connect(key: string, target: TunnelTarget): Entry {
    const entry: Entry = { reserved: 0, dead: false, ready: Promise.resolve(undefined as never) };
    entry.ready = connectHbone({
      host: target.address,
      port: target.hbonePort,
      credential: this.deps.credential(),
      bundle: this.deps.bundle,
      expectedIdentities: [target.identity],
      timeoutMs: this.deps.connectTimeoutMs ?? CONNECT_TIMEOUT_MS,
    }).then(
      (session) => {
        entry.session = session;
        session.once('close', () => this.#retire(key, entry));
        if (entry.dead) session.close();
        return session;
      },
      (e: unknown) => {
        log.debug({ key, err: (e as Error).message }, 'hbone connect to endpoint failed');
        this.#retire(key, entry);
        throw e;
      },
    );
    entry.ready.catch(() => {});
    return entry;
  }

  #release(key: string, entry: Entry): void {
    entry.reserved--;
    if (entry.reserved > 0 || entry.dead) return;
    entry.idle = setTimeout(() => this.#retire(key, entry), this.deps.idleMs ?? SESSION_IDLE_MS);
    entry.idle.unref();
  }

  #retire(key: string, entry: Entry): void {
    if (entry.idle) clearTimeout(entry.idle);
    const list = this.#entries.get(key);
    const i = list?.indexOf(entry) ?? -1;
    if (list && i >= 0) list.splice(i, 1);
    if (list?.length === 0) this.#entries.delete(key);
    if (entry.dead) return;
    entry.dead = true;
    if (entry.session && !entry.session.closed) entry.session.close();
  }
}
