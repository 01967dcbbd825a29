import { randomUUID } from 'node:crypto';
import { logger, ZmeshError } from '@zmesh/shared';
import { Etcd3, type IKeyValue, type IWatchResponse, type Watcher } from 'etcd3';
import { objectKey, type StoreObject } from '../k8s-objects.js';
import { decodeObject } from './sqlite-store.js';
import {
  type Bindings,
  bindingGroup,
  type SharedStateStore,
  type StateChange,
  type StoredState,
  type StoreObserver,
  timed,
} from './state-store.js';

const log = logger('etcd-store');

/** Every key zmesh writes lives under this prefix, so one etcd cluster can hold other data too. */
export const ETCD_PREFIX = 'zmesh/';
const OBJECTS = `${ETCD_PREFIX}objects/`;
const META = `${ETCD_PREFIX}meta/`;
/**
 * Served waypoint bindings, one key per namespace (a JSON object of that namespace's
 * bindings), so a change to a whole namespace is one operation of etcd's bounded txn.
 */
const BINDINGS = `${ETCD_PREFIX}bindings/`;
/** Written by every commit: its mod revision is the generation, the compare of every write. */
const GENERATION = `${ETCD_PREFIX}generation`;
/** How long one etcd call may take before it counts as failed (and is retried on another member). */
const CALL_TIMEOUT_MS = 3000;

/** `etcd://host:port[,host:port…]` → the client's endpoints; anything else is refused with the reason. */
export function parseEtcdUrl(url: string): string[] {
  const m = /^etcd:\/\/([^/?#]+)\/?$/.exec(url);
  if (!m?.[1]) throw storeError(url, 'expected etcd://host:port[,host:port...]');
  return m[1].split(',').map((hostPort) => {
    if (!/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(hostPort))
      throw storeError(url, `${hostPort || '(empty)'} is not host:port`);
    return `http://${hostPort}`;
  });
}

function storeError(where: string, reason: string): ZmeshError {
  return new ZmeshError('ZM_ERR_STATE_STORE', { dir: where, reason });
}

/**
 * The shared store on etcd (`--store etcd://…`): objects under `zmesh/objects/<Kind/ns/name>`,
 * served waypoint bindings under `zmesh/bindings/<namespace>`, named values (CA root, node-token key) under `zmesh/meta/`, and `zmesh/generation`, which
 * every commit rewrites last in its transaction. A commit compares that key's mod revision
 * with the generation the change was computed from, so two replicas never interleave: the
 * second one is told and recomputes. A watch from the loaded revision on keeps the mirror
 * (and through `onChange` every replica's served config) current; the etcd3 client fails
 * over between the listed members and resumes the watch where it left off.
 */
export class EtcdStateStore implements SharedStateStore {
  readonly location: string;
  readonly backend = 'etcd';
  readonly #client: Etcd3;
  #observer: StoreObserver | undefined;
  #objects = new Map<string, StoreObject>();
  /** Binding groups (namespace → its bindings), as stored. */
  #groups = new Map<string, ReadonlyMap<string, string>>();
  #generation = 0;
  /** The revision the mirror is current through (the watch resumes after it). */
  #revision = 0;
  #watcher: Watcher | undefined;
  #unreachable: string | undefined;
  /** Why the last call failed, until one succeeds: a lost quorum leaves the watch open but refuses writes. */
  #failing: string | undefined;
  readonly #listeners: Array<(state: StoredState) => void> = [];
  #closed = false;

  private constructor(location: string, client: Etcd3) {
    this.location = location;
    this.#client = client;
  }

  /** Connects, reads everything and starts the watch; ZM_ERR_STATE_STORE when etcd cannot be read. */
  static async open(url: string): Promise<EtcdStateStore> {
    const hosts = parseEtcdUrl(url);
    const client = new Etcd3({
      hosts,
      dialTimeout: CALL_TIMEOUT_MS,
      defaultCallOptions: (c) => (c.isStream ? {} : { deadline: Date.now() + CALL_TIMEOUT_MS }),
    });
    const store = new EtcdStateStore(url, client);
    try {
      await store.refresh();
      await store.#watch();
    } catch (e) {
      client.close();
      throw e instanceof ZmeshError ? e : storeError(url, describe(e));
    }
    return store;
  }

  snapshot(): StoredState {
    const bindings = new Map<string, string>();
    for (const group of this.#groups.values()) for (const [k, v] of group) bindings.set(k, v);
    return { objects: new Map(this.#objects), generation: this.#generation, bindings };
  }

  observe(observer: StoreObserver): void {
    this.#observer = observer;
  }

  refresh(): Promise<StoredState> {
    return timed(this.#observer, 'load', () => this.#refresh());
  }

  async #refresh(): Promise<StoredState> {
    const res = await this.#call(() => this.#client.getAll().prefix(ETCD_PREFIX).exec());
    const objects = new Map<string, StoreObject>();
    const groups = new Map<string, ReadonlyMap<string, string>>();
    let generation = 0;
    for (const kv of res.kvs) {
      const key = kv.key.toString();
      if (key === GENERATION) generation = Number(kv.mod_revision);
      else if (key.startsWith(OBJECTS)) objects.set(key.slice(OBJECTS.length), this.#decode(kv));
      else if (key.startsWith(BINDINGS)) groups.set(key.slice(BINDINGS.length), this.#decodeGroup(kv));
    }
    const revision = Number(res.header.revision);
    if (revision >= this.#revision) {
      this.#objects = objects;
      this.#groups = groups;
      this.#generation = generation;
      this.#revision = revision;
    }
    return this.snapshot();
  }

  commitIf(change: Omit<StateChange, 'generation'>, basedOn: number): Promise<number | undefined> {
    return timed(this.#observer, 'commit', () => this.#commitIf(change, basedOn));
  }

  async #commitIf(change: Omit<StateChange, 'generation'>, basedOn: number): Promise<number | undefined> {
    // The commit's own mark: a txn the client retried after a lost answer (or that failed
    // on the way back) is recognised as committed instead of being applied twice.
    const mark = randomUUID();
    const ops = [
      ...change.remove.map((k) => this.#client.delete().key(OBJECTS + k)),
      ...change.put.map((o) => this.#client.put(OBJECTS + objectKey(o)).value(JSON.stringify(o))),
      ...this.#groupOps(change.bindings?.after, [
        ...(change.bindings?.put.keys() ?? []),
        ...(change.bindings?.remove ?? []),
      ]),
      this.#client.put(GENERATION).value(mark),
    ];
    let failure: unknown;
    try {
      const res = await this.#client
        .if(GENERATION, 'Mod', '==', basedOn)
        .then(...ops)
        .commit();
      this.#failing = undefined;
      if (res.succeeded) return Number(res.header.revision);
    } catch (e) {
      failure = e;
      this.#failing = `last commit failed: ${describe(e)}`;
    }
    const current = await this.#call(() => this.#client.get(GENERATION).exec()).catch((e) => {
      throw failure === undefined ? e : storeError(this.location, describe(failure));
    });
    const kv = current.kvs[0];
    if (kv?.value.toString() === mark) return Number(kv.mod_revision);
    if (failure !== undefined) throw storeError(this.location, describe(failure));
    return undefined;
  }

  /** Rewrites (or deletes, once empty) each binding group `keys` touch, from the whole set `after`. */
  #groupOps(after: Bindings | undefined, keys: readonly string[]) {
    if (after === undefined) return [];
    const touched = new Set(keys.map(bindingGroup));
    const groups = new Map<string, Record<string, string>>([...touched].map((g) => [g, {}]));
    for (const [k, v] of after) {
      const group = groups.get(bindingGroup(k));
      if (group !== undefined) group[k] = v;
    }
    return [...groups].map(([g, bindings]) =>
      Object.keys(bindings).length === 0
        ? this.#client.delete().key(BINDINGS + g)
        : this.#client.put(BINDINGS + g).value(JSON.stringify(bindings)),
    );
  }

  onChange(listener: (state: StoredState) => void): void {
    this.#listeners.push(listener);
  }

  async metaOrCreate(key: string, create: () => Promise<string>): Promise<string> {
    const existing = await timed(this.#observer, 'read-meta', () =>
      this.#call(() => this.#client.get(META + key).string()),
    );
    if (existing !== null) return existing;
    const value = await create();
    const res = await timed(this.#observer, 'write-meta', () =>
      this.#call(() =>
        this.#client
          .if(META + key, 'Create', '==', 0)
          .then(this.#client.put(META + key).value(value))
          .else(this.#client.get(META + key))
          .commit(),
      ),
    );
    if (res.succeeded) return value;
    // Another replica created it first: everyone uses that one.
    const kv = res.responses[0]?.response_range?.kvs[0];
    if (kv === undefined) throw storeError(this.location, `${key} vanished while it was created`);
    return kv.value.toString();
  }

  health(): string | undefined {
    const why = this.#unreachable ?? this.#failing;
    return why === undefined ? undefined : `state store ${this.location} unreachable: ${why}`;
  }

  async close(): Promise<void> {
    this.#closed = true;
    // Bounded: with etcd unreachable the cancel would wait for it; closing the client ends it anyway.
    const cancelled = this.#watcher?.cancel().catch(() => undefined);
    await Promise.race([cancelled, new Promise((r) => setTimeout(r, CALL_TIMEOUT_MS).unref())]);
    this.#client.close();
  }

  async #watch(): Promise<void> {
    const watcher = await this.#client
      .watch()
      .prefix(ETCD_PREFIX)
      .startRevision(String(this.#revision + 1))
      .create();
    this.#watcher = watcher;
    watcher.on('data', (res) => this.#onWatch(res));
    watcher.on('connected', () => {
      if (this.#unreachable !== undefined) log.info({ store: this.location }, 'state store watch resumed');
      this.#unreachable = undefined;
    });
    watcher.on('disconnected', (e) => {
      // Once per loss: the client retries (jittered backoff) until a member answers.
      const level = this.#unreachable === undefined ? 'warn' : 'debug';
      this.#unreachable = `watch disconnected: ${describe(e)}`;
      log[level](
        { store: this.location, err: describe(e) },
        'state store watch lost; serving the last state, retrying',
      );
    });
    // Canceled by etcd (e.g. its history was compacted past our revision): read it all again and watch anew.
    watcher.on('error', (e) => {
      if (this.#closed) return;
      this.#unreachable = `watch failed: ${describe(e)}`;
      log.warn({ store: this.location, err: describe(e) }, 'state store watch canceled; reloading');
      void this.#rewatch();
    });
  }

  async #rewatch(): Promise<void> {
    while (!this.#closed) {
      try {
        await this.#watcher?.cancel().catch(() => undefined);
        const before = this.#generation;
        const state = await this.refresh();
        if (state.generation > before) this.#emit();
        await this.#watch();
        return;
      } catch (e) {
        log.warn({ err: describe(e) }, 'state store reload failed; retrying');
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /**
   * Applies watched events revision by revision; each revision that rewrote the generation
   * key is one commit, and is handed to the listeners whole (the key is the commit's last op).
   */
  #onWatch(res: IWatchResponse): void {
    for (const ev of res.events) {
      const revision = Number(ev.kv.mod_revision);
      if (revision <= this.#revision) continue; // already in what refresh() read
      const key = ev.kv.key.toString();
      if (key === GENERATION) {
        this.#generation = revision;
        this.#revision = revision;
        timed(this.#observer, 'watch-apply', () => this.#emit());
      } else if (key.startsWith(OBJECTS)) {
        const name = key.slice(OBJECTS.length);
        if (ev.type === 'Delete') this.#objects.delete(name);
        else {
          try {
            this.#objects.set(name, this.#decode(ev.kv));
          } catch (e) {
            log.error({ key, err: describe(e) }, 'state store holds an object zmesh cannot read; ignored');
          }
        }
      } else if (key.startsWith(BINDINGS)) {
        const group = key.slice(BINDINGS.length);
        if (ev.type === 'Delete') this.#groups.delete(group);
        else this.#groups.set(group, this.#decodeGroup(ev.kv));
      }
    }
  }

  #emit(): void {
    const state = this.snapshot();
    for (const l of this.#listeners) l(state);
  }

  #decode(kv: IKeyValue): StoreObject {
    const key = kv.key.toString().slice(OBJECTS.length);
    const object = decodeObject(key, kv.value.toString());
    if (typeof object === 'string') throw storeError(this.location, `object ${key}: ${object}`);
    return object;
  }

  /**
   * One namespace's bindings. What zmesh cannot read is dropped with a log line: those
   * objects are then served as compiled (a waypoint they name is never bypassed), not refused.
   */
  #decodeGroup(kv: IKeyValue): ReadonlyMap<string, string> {
    const group = kv.key.toString().slice(BINDINGS.length);
    try {
      const o: unknown = JSON.parse(kv.value.toString());
      if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new Error('not an object');
      return new Map(
        Object.entries(o).filter(
          (e): e is [string, string] => typeof e[1] === 'string' && bindingGroup(e[0]) === group,
        ),
      );
    } catch (e) {
      log.error(
        { group, err: describe(e) },
        'state store holds waypoint bindings zmesh cannot read; ignored',
      );
      return new Map();
    }
  }

  async #call<T>(run: () => Promise<T>): Promise<T> {
    try {
      const value = await run();
      this.#failing = undefined;
      return value;
    } catch (e) {
      this.#failing = `last call failed: ${describe(e)}`;
      throw e instanceof ZmeshError ? e : storeError(this.location, describe(e));
    }
  }
}

function describe(e: unknown): string {
  // grpc-js appends an empty "Resolution note:" to connection errors.
  return (e instanceof Error ? e.message : String(e))
    .replace(/\.?\s*Resolution note:\s*$/, '')
    .replace(
      /^Execution prevented because the circuit breaker is open$/,
      'no etcd member answered the last calls (the client waits a few seconds before trying again)',
    );
}
