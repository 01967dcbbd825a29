import { objectKey, type StoreObject } from '../k8s-objects.js';

/**
 * The served waypoint bindings (waypoint-hold.ts): which path each workload and service was
 * last served with. Key `<namespace>/w/<uid>` or `<namespace>/s/<hostname>`; value the
 * waypoint reference it was served through, as JSON, or `''` for direct. An object served
 * through a waypoint keeps that waypoint here, so no replica and no restart routes around it.
 */
export type Bindings = ReadonlyMap<string, string>;

/** Bindings that change in one commit, and the whole set after it. */
export interface BindingsChange {
  readonly put: ReadonlyMap<string, string>;
  readonly remove: readonly string[];
  /** Every binding once the change is made (a backend that stores them grouped rewrites each touched group from it). */
  readonly after: Bindings;
}

/** What changes from `before` to `after`; `drop` false keeps keys `after` lacks (puts only). */
export function bindingsChange(before: Bindings, after: Bindings, drop: boolean): BindingsChange {
  const put = new Map<string, string>();
  for (const [k, v] of after) if (before.get(k) !== v) put.set(k, v);
  const remove: string[] = [];
  if (drop) for (const k of before.keys()) if (!after.has(k)) remove.push(k);
  if (drop || put.size === 0) return { put, remove, after: drop ? after : before };
  const whole = new Map(before);
  for (const [k, v] of put) whole.set(k, v);
  return { put, remove, after: whole };
}

/** Whether `change` changes anything. */
export function changesBindings(change: BindingsChange | undefined): change is BindingsChange {
  return change !== undefined && (change.put.size > 0 || change.remove.length > 0);
}

/** The binding group a key belongs to: its namespace (etcd keeps one key per group). */
export function bindingGroup(key: string): string {
  const slash = key.indexOf('/');
  return slash < 0 ? key : key.slice(0, slash);
}

/** What a store holds for the config store: every applied object, the generation counter and the served bindings. */
export interface StoredState {
  readonly objects: ReadonlyMap<string, StoreObject>;
  readonly generation: number;
  readonly bindings: Bindings;
}

/** Which kind of store: a bounded label of the store-latency histogram. */
export type StoreBackend = 'memory' | 'sqlite' | 'etcd';
/**
 * What a store did, for `zmesh_cp_store_operation_seconds{op}`: read everything (`load`), commit a
 * change (`commit`), read or write a named value, or (etcd) apply one watched commit to the
 * served config (`watch-apply`: the mirror, then the listeners' compile and push).
 */
export type StoreOp = 'load' | 'commit' | 'read-meta' | 'write-meta' | 'watch-apply';
/** Told of every operation with how long it took and whether it failed (the control plane's metrics). */
export type StoreObserver = (op: StoreOp, seconds: number, failed: boolean) => void;

/** Runs `body` as operation `op`, telling `observer` (if any) its duration and outcome. */
export function timed<T>(observer: StoreObserver | undefined, op: StoreOp, body: () => T): T {
  if (observer === undefined) return body();
  const started = process.hrtime.bigint();
  const done = (failed: boolean) => observer(op, Number(process.hrtime.bigint() - started) / 1e9, failed);
  let result: T;
  try {
    result = body();
  } catch (e) {
    done(true);
    throw e;
  }
  if (result instanceof Promise)
    return result.then(
      (v) => {
        done(false);
        return v;
      },
      (e: unknown) => {
        done(true);
        throw e;
      },
    ) as T;
  done(false);
  return result;
}

/** One accepted change: written as one transaction, so after a crash it is wholly there or absent. */
export interface StateChange {
  readonly put: readonly StoreObject[];
  /** Keys (`Kind/namespace/name`) of applied objects that are gone. */
  readonly remove: readonly string[];
  readonly generation: number;
  /** Served waypoint bindings that change with it (absent: none), in the same transaction. */
  readonly bindings?: BindingsChange;
}

/**
 * The control plane's source of truth (ARCHITECTURE.md, "State"). Applied objects, the
 * generation, the served waypoint bindings, and small named values (the node-token key, the CA root, xDS version
 * counters) live here. Every method is synchronous: the embedded backend commits before
 * `apply` returns, so an acknowledged apply is on disk. A failure throws ZM_ERR_STATE_STORE
 * and leaves the store as it was.
 */
export interface StateStore {
  /** For logs and errors: `memory`, or the database path. */
  readonly location: string;
  readonly backend: StoreBackend;
  /** Reports every later operation's duration to `observer` (one observer; a second replaces it). */
  observe(observer: StoreObserver): void;
  load(): StoredState;
  commit(change: StateChange): void;
  getMeta(key: string): string | undefined;
  /** Sets several values in one transaction. */
  putMeta(values: Readonly<Record<string, string>>): void;
  close(): void;
}

/** Nothing survives the process: `--no-state-dir`, and tests. */
export class MemoryStateStore implements StateStore {
  readonly location = 'memory';
  readonly backend = 'memory';
  readonly #objects = new Map<string, StoreObject>();
  readonly #meta = new Map<string, string>();
  readonly #bindings = new Map<string, string>();
  #generation = 0;
  #observer: StoreObserver | undefined;

  observe(observer: StoreObserver): void {
    this.#observer = observer;
  }

  load(): StoredState {
    return timed(this.#observer, 'load', () => ({
      objects: new Map(this.#objects),
      generation: this.#generation,
      bindings: new Map(this.#bindings),
    }));
  }

  commit(change: StateChange): void {
    timed(this.#observer, 'commit', () => {
      for (const key of change.remove) this.#objects.delete(key);
      for (const o of change.put) this.#objects.set(objectKey(o), o);
      for (const key of change.bindings?.remove ?? []) this.#bindings.delete(key);
      for (const [key, value] of change.bindings?.put ?? []) this.#bindings.set(key, value);
      this.#generation = change.generation;
    });
  }

  getMeta(key: string): string | undefined {
    return timed(this.#observer, 'read-meta', () => this.#meta.get(key));
  }

  putMeta(values: Readonly<Record<string, string>>): void {
    timed(this.#observer, 'write-meta', () => {
      for (const [k, v] of Object.entries(values)) this.#meta.set(k, v);
    });
  }

  close(): void {}
}

/** A named value the store keeps, created on first use (the node-token key, the CA root). */
export function metaOrCreate(store: StateStore, key: string, create: () => string): string {
  const existing = store.getMeta(key);
  if (existing !== undefined) return existing;
  const value = create();
  store.putMeta({ [key]: value });
  return value;
}

/**
 * A store several control-plane replicas share (etcd). Reads come from a mirror kept current
 * by a watch; every write is one transaction that commits only if nobody committed since the
 * generation it was computed from (compare on revision), so nothing is half-applied and no
 * replica overwrites another's apply. The generation is the store's revision of that commit,
 * the same on every replica.
 */
export interface SharedStateStore {
  readonly location: string;
  readonly backend: StoreBackend;
  /** Reports every later operation's duration to `observer`, the watched commits' too. */
  observe(observer: StoreObserver): void;
  /** The state as last read or watched. */
  snapshot(): StoredState;
  /** Reads the whole state again (after a conflict, or a watch that cannot resume). */
  refresh(): Promise<StoredState>;
  /**
   * Commits `change` if the generation is still `basedOn`: resolves the new generation, or
   * undefined when another replica committed first. Rejects (ZM_ERR_STATE_STORE) when the
   * store cannot be reached; then nothing was written, or the caller's retry finds it was.
   */
  commitIf(change: Omit<StateChange, 'generation'>, basedOn: number): Promise<number | undefined>;
  /** Calls `listener` with each later state any replica commits, in order. */
  onChange(listener: (state: StoredState) => void): void;
  /** The value under `key`; created by whichever replica asks first (create-if-absent), so all share it. */
  metaOrCreate(key: string, create: () => Promise<string>): Promise<string>;
  /** Why the store cannot be reached now, if it cannot (readiness). */
  health(): string | undefined;
  close(): Promise<void>;
}
