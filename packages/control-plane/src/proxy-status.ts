import type { ResourceCache } from './resource-cache.js';

/** Proxies that went away are remembered (their pending changes matter) up to this many. */
const MAX_PROXY_RECORDS = 10_000;
/** Refused streams remembered by claimed proxy id; the oldest is forgotten beyond this. */
const MAX_REFUSED_RECORDS = 256;
/** Names listed per type in the report; the count is always exact. */
const MAX_LISTED_NAMES = 20;

/** What one proxy has been sent and has confirmed, for one type URL. */
export interface TypeStatus {
  sentVersion?: number;
  ackedVersion?: number;
  nacked?: { version: number; reason: string; at: number };
  /** Resource name → version the proxy confirmed applying (or claimed on reconnect). */
  readonly acked: Map<string, string>;
  /** Resource name → why the proxy rejected its current version. */
  readonly rejected: Map<string, string>;
  /** Names the proxy subscribed to (a waypoint: its own config); undefined = wildcard. */
  subscribed?: ReadonlySet<string> | undefined;
}

export interface ProxyRecord {
  readonly proxyId: string;
  readonly node: string;
  connected: boolean;
  lastContact: number;
  /** `host:port` of the proxy's admin endpoint, as its node metadata (ADMIN_ADDRESS) said. */
  admin?: string | undefined;
  readonly types: Map<string, TypeStatus>;
  /** The control plane refused this proxy's last stream (token, node claim): why and when. */
  refused?: { reason: string; at: number } | undefined;
}

export interface TypeReport {
  current: number;
  sent: number | null;
  acked: number | null;
  nacked: { version: number; reason: string } | null;
  /** Changed in the store but not confirmed by the proxy: never reported as applied. */
  pending: { count: number; names: string[] };
  rejected: Array<{ name: string; reason: string }>;
  state: 'SYNCED' | 'PENDING' | 'NACKED';
}

export interface ProxyReport {
  proxy: string;
  node: string;
  connected: boolean;
  lastContactSecondsAgo: number;
  /** The admin endpoint the proxy announced (`host:port`, an IP literal), or null. */
  admin: string | null;
  /**
   * Set when the control plane refused the proxy's last stream: it holds whatever it had
   * before, and gets nothing new. A proxy only ever refused is listed by the id it claimed.
   */
  refused: { reason: string; secondsAgo: number } | null;
  types: Record<string, TypeReport>;
}

/**
 * Push/ACK bookkeeping for `zmesh proxy-status`. A change counts as applied only once the
 * proxy ACKs a response carrying it; until then, and through an outage, it is pending.
 */
export class ProxyStatusRegistry {
  readonly #records = new Map<string, ProxyRecord>();
  /** Streams refused before any session, by the proxy id they claimed (unverified, bounded). */
  readonly #refused = new Map<string, { node: string; reason: string; at: number }>();

  /**
   * The control plane refused a stream (`proxyId` as claimed, or the peer address): a known
   * proxy's row says so; an unknown one gets a row of its own, so proxy-status never shows
   * `[]` while proxies are being turned away.
   */
  refused(proxyId: string, node: string, reason: string, now = Date.now()): void {
    const known = this.#records.get(proxyId);
    if (known !== undefined) {
      known.refused = { reason, at: now };
      known.lastContact = now;
      return;
    }
    this.#refused.delete(proxyId);
    this.#refused.set(proxyId, { node, reason, at: now });
    if (this.#refused.size > MAX_REFUSED_RECORDS) this.#refused.delete(this.#refused.keys().next().value!);
  }

  /** Per type URL, responses sent and the ACKs and NACKs they got (for /metrics). */
  readonly counts = new Map<string, { pushes: number; acks: number; nacks: number }>();

  /** Called after each ACK is recorded (the control plane re-serves bindings held for a waypoint). */
  onAck: ((typeUrl: string) => void) | undefined;

  count(typeUrl: string, what: 'pushes' | 'acks' | 'nacks'): void {
    if (what === 'acks') this.onAck?.(typeUrl);
    let c = this.counts.get(typeUrl);
    if (c === undefined) {
      c = { pushes: 0, acks: 0, nacks: 0 };
      this.counts.set(typeUrl, c);
    }
    c[what]++;
  }

  record(proxyId: string, node: string): ProxyRecord {
    let r = this.#records.get(proxyId);
    if (r === undefined) {
      this.#evictIfFull();
      r = { proxyId, node, connected: false, lastContact: Date.now(), types: new Map() };
      this.#records.set(proxyId, r);
    }
    r.refused = undefined;
    this.#refused.delete(proxyId);
    return r;
  }

  typeStatus(record: ProxyRecord, typeUrl: string): TypeStatus {
    let t = record.types.get(typeUrl);
    if (t === undefined) {
      t = { acked: new Map(), rejected: new Map() };
      record.types.set(typeUrl, t);
    }
    return t;
  }

  report(cache: ResourceCache, now = Date.now()): ProxyReport[] {
    const ago = (at: number) => Math.max(0, (now - at) / 1000);
    const sessions = [...this.#records.values()].map(
      (r): ProxyReport => ({
        proxy: r.proxyId,
        node: r.node,
        connected: r.connected,
        lastContactSecondsAgo: ago(r.lastContact),
        admin: r.admin ?? null,
        refused: r.refused ? { reason: r.refused.reason, secondsAgo: ago(r.refused.at) } : null,
        types: Object.fromEntries(
          [...r.types].map(([typeUrl, t]) => [typeUrl, typeReport(cache, typeUrl, t)]),
        ),
      }),
    );
    const refusedOnly = [...this.#refused].map(
      ([proxy, r]): ProxyReport => ({
        proxy,
        node: r.node,
        connected: false,
        lastContactSecondsAgo: ago(r.at),
        admin: null,
        refused: { reason: r.reason, secondsAgo: ago(r.at) },
        types: {},
      }),
    );
    return [...sessions, ...refusedOnly].sort((a, b) => a.proxy.localeCompare(b.proxy));
  }

  /**
   * Connected proxies that have ACKed resource `name` of `typeUrl`: `any` at some version
   * (they hold a working copy), `current` at the version the cache holds now.
   */
  ackers(cache: ResourceCache, typeUrl: string, name: string): { any: string[]; current: string[] } {
    return this.ackersOf(cache, typeUrl).get(name) ?? { any: [], current: [] };
  }

  /** `ackers` for every name of the type, in one pass over the proxies. */
  ackersOf(cache: ResourceCache, typeUrl: string): Map<string, { any: string[]; current: string[] }> {
    const resources = cache.view(typeUrl).resources;
    const out = new Map<string, { any: string[]; current: string[] }>();
    for (const r of this.#records.values()) {
      const acked = r.connected ? r.types.get(typeUrl)?.acked : undefined;
      if (acked === undefined) continue;
      for (const [name, version] of acked) {
        let entry = out.get(name);
        if (entry === undefined) {
          entry = { any: [], current: [] };
          out.set(name, entry);
        }
        entry.any.push(r.proxyId);
        if (resources.get(name)?.version === version) entry.current.push(r.proxyId);
      }
    }
    return out;
  }

  connectedCount(): number {
    let n = 0;
    for (const r of this.#records.values()) if (r.connected) n++;
    return n;
  }

  toJSON(cache: ResourceCache): string {
    return JSON.stringify(this.report(cache), null, 2);
  }

  #evictIfFull(): void {
    if (this.#records.size < MAX_PROXY_RECORDS) return;
    const oldest = [...this.#records.values()]
      .filter((r) => !r.connected)
      .sort((a, b) => a.lastContact - b.lastContact)[0];
    if (oldest) this.#records.delete(oldest.proxyId);
  }
}

function typeReport(cache: ResourceCache, typeUrl: string, t: TypeStatus): TypeReport {
  const view = cache.view(typeUrl);
  const pending: string[] = [];
  for (const [name, r] of view.resources) {
    if (t.subscribed !== undefined && !t.subscribed.has(name)) continue;
    if (t.acked.get(name) !== r.version) pending.push(name);
  }
  for (const name of t.acked.keys()) if (!view.resources.has(name)) pending.push(name);
  const rejected = [...t.rejected].map(([name, reason]) => ({ name, reason }));
  return {
    current: view.version,
    sent: t.sentVersion ?? null,
    acked: t.ackedVersion ?? null,
    nacked: t.nacked ? { version: t.nacked.version, reason: t.nacked.reason } : null,
    pending: { count: pending.length, names: pending.sort().slice(0, MAX_LISTED_NAMES) },
    rejected,
    state: rejected.length > 0 ? 'NACKED' : pending.length > 0 ? 'PENDING' : 'SYNCED',
  };
}
