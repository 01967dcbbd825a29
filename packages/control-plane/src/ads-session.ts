import { randomBytes } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import type { DeltaRequest, DeltaResponse } from '@zmesh/shared';
import { logger } from '@zmesh/shared';
import type { ProxyRecord, ProxyStatusRegistry, TypeStatus } from './proxy-status.js';
import type { CachedResource, ResourceCache } from './resource-cache.js';

const log = logger('ads-session');

/** The one response per type that may await an ACK; later changes wait and coalesce. */
interface InFlight {
  nonce: string;
  cacheVersion: number;
  updated: Map<string, string>;
  removed: string[];
}

interface TypeState {
  /** undefined = wildcard subscription. */
  names: Set<string> | undefined;
  /** What this proxy holds, as far as we have told it (or it told us on reconnect). */
  view: Map<string, string>;
  inFlight: InFlight | undefined;
  /** Cache version whose every change is reflected in `view`; undefined forces a full diff. */
  syncedThrough: number | undefined;
  /** The first request of a type always gets a response, even an empty one, so the proxy knows it is current. */
  owesFirst: boolean;
  status: TypeStatus;
}

export type AdsStream = grpc.ServerDuplexStream<DeltaRequest, DeltaResponse>;

/**
 * One proxy's delta ADS stream. At most one response per type is in flight: a slow proxy
 * never accumulates a backlog, because what it has not yet received is recomputed from the
 * cache when it ACKs (coalescing every change in between).
 */
export class AdsSession {
  readonly record: ProxyRecord;
  readonly #call: AdsStream;
  readonly #cache: ResourceCache;
  readonly #registry: ProxyStatusRegistry;
  readonly #types = new Map<string, TypeState>();
  readonly #noncePrefix = randomBytes(4).toString('hex');
  #nonces = 0;

  readonly #primed: () => boolean;
  readonly #mayRead: (typeUrl: string, name: string) => boolean;

  /**
   * `primed`: false until the server holds a real config, so nothing is pushed before it.
   * `mayRead`: whether this proxy may be sent a resource at all (a waypoint's config goes
   * only to the node its pod runs on); a resource it may not read is, to it, absent.
   */
  constructor(
    call: AdsStream,
    record: ProxyRecord,
    cache: ResourceCache,
    registry: ProxyStatusRegistry,
    primed: () => boolean,
    mayRead: (typeUrl: string, name: string) => boolean = () => true,
  ) {
    this.#call = call;
    this.record = record;
    this.#cache = cache;
    this.#registry = registry;
    this.#primed = primed;
    this.#mayRead = mayRead;
  }

  onRequest(req: DeltaRequest, servedTypes: readonly string[]): void {
    this.record.lastContact = Date.now();
    const typeUrl = req.typeUrl ?? '';
    if (!servedTypes.includes(typeUrl)) {
      log.debug({ proxy: this.record.proxyId, typeUrl }, 'request for a type this server does not serve');
      return;
    }
    let state = this.#types.get(typeUrl);
    if (state === undefined) {
      state = this.#subscribe(typeUrl, req);
    } else {
      this.#updateNames(state, req);
      if (req.responseNonce) this.#onReply(typeUrl, state, req);
    }
    this.push(typeUrl);
  }

  /** Sends what changed for this type, unless a response is still awaiting its ACK. */
  push(typeUrl: string): void {
    const state = this.#types.get(typeUrl);
    if (state === undefined || state.inFlight !== undefined || !this.#primed()) return;
    const { version, resources } = this.#cache.view(typeUrl);
    const { updated, removed } = this.#diff(typeUrl, state, resources);
    state.syncedThrough = version;
    if (updated.length === 0 && removed.length === 0 && !state.owesFirst) return;
    state.owesFirst = false;
    updated.sort((a, b) => a.rank - b.rank);
    const nonce = `${this.#noncePrefix}-${++this.#nonces}`;
    const inFlight: InFlight = { nonce, cacheVersion: version, updated: new Map(), removed };
    for (const r of updated) {
      inFlight.updated.set(r.name, r.version);
      state.view.set(r.name, r.version);
    }
    for (const name of removed) state.view.delete(name);
    state.inFlight = inFlight;
    state.status.sentVersion = version;
    this.#registry.count(typeUrl, 'pushes');
    this.#call.write({
      typeUrl,
      nonce,
      systemVersionInfo: String(version),
      removedResources: removed,
      resources: updated.map((r) => ({
        name: r.name,
        version: r.version,
        resource: { type_url: r.payloadType, value: r.bytes },
      })),
    });
  }

  /** What the proxy lacks: only the journal's changed names when it reaches back, else everything. */
  #diff(
    typeUrl: string,
    state: TypeState,
    resources: ReadonlyMap<string, CachedResource>,
  ): { updated: CachedResource[]; removed: string[] } {
    const updated: CachedResource[] = [];
    const removed: string[] = [];
    const changed =
      state.syncedThrough === undefined ? undefined : this.#cache.changesSince(typeUrl, state.syncedThrough);
    const check = (name: string) => {
      const r = resources.get(name);
      if (r !== undefined && subscribed(state, name) && this.#mayRead(typeUrl, name)) {
        if (state.view.get(name) !== r.version) updated.push(r);
      } else if (state.view.has(name)) {
        removed.push(name);
      }
    };
    if (changed !== undefined) {
      for (const name of changed) check(name);
    } else {
      for (const name of resources.keys()) check(name);
      for (const name of state.view.keys()) if (!resources.has(name)) removed.push(name);
    }
    return { updated, removed };
  }

  pushAll(): void {
    for (const typeUrl of this.#types.keys()) this.push(typeUrl);
  }

  #subscribe(typeUrl: string, req: DeltaRequest): TypeState {
    const names = req.resourceNamesSubscribe ?? [];
    const initial = new Map(Object.entries(req.initialResourceVersions ?? {}));
    const status = this.#registry.typeStatus(this.record, typeUrl);
    // On reconnect the proxy states what it holds (xDS "initial_resource_versions"): that,
    // not our memory of the old stream, is what it has applied.
    status.acked.clear();
    for (const [name, version] of initial) status.acked.set(name, version);
    status.rejected.clear();
    const state: TypeState = {
      names: names.length === 0 || names.includes('*') ? undefined : new Set(names),
      view: initial,
      inFlight: undefined,
      syncedThrough: undefined,
      owesFirst: true,
      status,
    };
    status.subscribed = state.names;
    this.#types.set(typeUrl, state);
    return state;
  }

  #updateNames(state: TypeState, req: DeltaRequest): void {
    const add = req.resourceNamesSubscribe ?? [];
    const drop = req.resourceNamesUnsubscribe ?? [];
    if (add.includes('*')) state.names = undefined;
    else if (state.names !== undefined) for (const n of add) state.names.add(n);
    if (state.names !== undefined) for (const n of drop) state.names.delete(n);
    state.status.subscribed = state.names;
    if (add.length > 0 || drop.length > 0) state.syncedThrough = undefined;
  }

  #onReply(typeUrl: string, state: TypeState, req: DeltaRequest): void {
    const inFlight = state.inFlight;
    if (inFlight === undefined || req.responseNonce !== inFlight.nonce) return; // stale nonce: superseded
    state.inFlight = undefined;
    const message = req.errorDetail?.message;
    if (message === undefined || message === '') {
      applyAck(state.status, inFlight, new Set());
      state.status.ackedVersion = inFlight.cacheVersion;
      this.#registry.count(typeUrl, 'acks');
      return;
    }
    const rejected = rejectedNames(inFlight, message);
    applyAck(state.status, inFlight, rejected);
    for (const name of rejected) state.status.rejected.set(name, message);
    state.status.nacked = { version: inFlight.cacheVersion, reason: message, at: Date.now() };
    this.#registry.count(typeUrl, 'nacks');
    log.warn({ proxy: this.record.proxyId, typeUrl, reason: message }, 'proxy rejected config');
  }
}

function subscribed(state: TypeState, name: string): boolean {
  return state.names === undefined || state.names.has(name);
}

/**
 * A NACK's message names the resources it rejects (`<name>: <reason>`, as XdsClient writes
 * it); those named were not applied, the rest were. A message naming none of them rejects
 * the whole response, so a change is never reported as applied when it may not be.
 */
function rejectedNames(inFlight: InFlight, message: string): Set<string> {
  const named = [...inFlight.updated.keys()].filter((n) => message.includes(`${n}: `));
  return new Set(named.length > 0 ? named : [...inFlight.updated.keys(), ...inFlight.removed]);
}

function applyAck(status: TypeStatus, inFlight: InFlight, rejected: ReadonlySet<string>): void {
  for (const [name, version] of inFlight.updated) {
    if (rejected.has(name)) continue;
    status.acked.set(name, version);
    status.rejected.delete(name);
  }
  for (const name of inFlight.removed) {
    if (rejected.has(name)) continue;
    status.acked.delete(name);
    status.rejected.delete(name);
  }
}
