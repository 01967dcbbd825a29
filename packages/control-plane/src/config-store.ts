import { EventEmitter } from 'node:events';
import { type FSWatcher, watch } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { err, logger, ok, type Result } from '@zmesh/shared';
import { parseAllDocuments } from 'yaml';
import { type AdmitChecks, admit } from './admission.js';
import { objectKey, type StoreObject } from './k8s-objects.js';
import { parseObject } from './parse-object.js';
import {
  type Bindings,
  type BindingsChange,
  bindingsChange,
  changesBindings,
  type SharedStateStore,
  type StateStore,
  type StoredState,
} from './store/state-store.js';

const log = logger('config-store');

/** Editors write a file in several steps; one reload per burst. */
const DEFAULT_DEBOUNCE_MS = 100;
/** Bounds what one reload reads, so a stray large file cannot stall the control plane. */
const MAX_FILE_BYTES = 16 * 1024 * 1024;

/** An immutable view of the store; a new one replaces it on every accepted change. */
export interface StoreView {
  readonly generation: number;
  readonly objects: ReadonlyMap<string, StoreObject>;
}

export function objectsOf<K extends StoreObject['kind']>(
  view: StoreView,
  kind: K,
): Extract<StoreObject, { kind: K }>[] {
  return [...view.objects.values()].filter((o): o is Extract<StoreObject, { kind: K }> => o.kind === kind);
}

export interface ConfigStoreOptions {
  /** Directory of YAML files (Kubernetes/Istio shapes), watched when `watch()` is called. */
  dir?: string;
  debounceMs?: number;
  /**
   * Where applied objects, the generation and the served waypoint bindings are kept (store/). Loaded at construction
   * (ZM_ERR_STATE_STORE when it cannot be read); every accepted change is committed there
   * first, in one transaction, and a change the store refuses is refused.
   */
  state?: StateStore;
  /**
   * A store shared with other replicas (etcd): the view starts from its snapshot, follows
   * every commit it reports, and changes go through `submit` (one compare-on-revision
   * transaction each). Excludes `state`. With `dir` too, the directory's files are this
   * replica's own (the same ConfigMap on every pod): a reload serves them at once and
   * writes nothing to the shared store, so the generation stays the store's.
   */
  shared?: SharedStateStore;
  /** Admission beyond `admit` (the control plane's compile-and-validate of waypoint configs); run once `admit` passes. */
  admit?: (
    objects: ReadonlyMap<string, StoreObject>,
    originOf: (key: string) => string | undefined,
  ) => string[];
  /**
   * The served waypoint bindings the would-be objects give, from the last-served ones
   * (the control plane's compile and WaypointHold): computed once a change is admitted and
   * committed with it, in its transaction. Absent: the bindings are left as they are.
   */
  bindings?: (objects: ReadonlyMap<string, StoreObject>, last: Bindings) => Bindings;
}

/** What `recordBindings` did: written now (local store), on its way (shared: a 'change' follows), or not written. */
export type BindingsRecord = 'recorded' | 'pending' | 'failed';

/**
 * The control plane's configuration: a directory of YAML plus objects applied through
 * `apply` (the CLI's `zmesh apply -f`, the harness). Every reload or apply is all-or-nothing:
 * an invalid document refuses the whole change with file, field and reason, and the running
 * view stays. Before anything commits, `admit` (admission.ts) checks the whole would-be view
 * the way serving will: what it refuses is never stored. Events: 'change' (StoreView),
 * 'rejected' (reasons, source).
 */
/** One change, for `submit`: what `apply`, `applyYaml`, `remove` and `removeYaml` take. */
export type ConfigEdit =
  | { apply: readonly unknown[]; source?: string }
  | { applyYaml: string; source?: string }
  | { remove: readonly string[] }
  | { removeYaml: string; source?: string };

/**
 * A change refused because the store could not be written (etcd unreachable, a disk error):
 * not the change's fault, so the admin answers 503 ZM_ERR_STATE_STORE and it may be retried.
 */
export interface StoreUnavailable {
  ok: false;
  error: string[];
  unavailable: true;
}

/** Times a shared-store change is recomputed when other replicas keep committing first. */
const MAX_SHARED_ATTEMPTS = 5;

/** An admitted change, ready to commit. */
interface Prepared {
  files: Map<string, StoreObject>;
  applied: Map<string, StoreObject>;
  objects: Map<string, StoreObject>;
  changed: ReadonlyMap<string, string>;
  put: StoreObject[];
  remove: string[];
  /** The served bindings that change with it, and all of them after. */
  bindings: BindingsChange;
}

/** No binding changes: `bindings` stays as it is. */
const unchanged = (bindings: Bindings): BindingsChange => ({ put: new Map(), remove: [], after: bindings });

/** What an edit would make `applied`, before admission. */
interface Edit {
  applied: Map<string, StoreObject>;
  changed: Map<string, string>;
}

export class ConfigStore extends EventEmitter {
  readonly #opts: ConfigStoreOptions;
  #files = new Map<string, StoreObject>();
  #applied = new Map<string, StoreObject>();
  /** Key → `file#doc (Kind ns/name)` it came from, for admission's reasons. */
  #origins = new Map<string, string>();
  #view: StoreView = { generation: 0, objects: new Map() };
  #watcher: FSWatcher | undefined;
  #debounce: NodeJS.Timeout | undefined;
  #reloading: Promise<void> = Promise.resolve();
  /** Restored from a store with history: the first reload commits it, so it is compiled and served. */
  #restored = false;
  /** Why the last reload could not read the directory (not: found it invalid), if it could not. */
  #unreadable: string | undefined;
  /** Why the last commit to the local store failed (a disk error), until one succeeds. */
  #commitFailure: string | undefined;
  /** Shared-store changes run one at a time, so this replica never races itself. */
  #submitting: Promise<unknown> = Promise.resolve();
  /** The served waypoint bindings as stored, current with the view. */
  #bindings: Bindings = new Map();
  /** A shared-store bindings record in flight. */
  #recording = false;

  constructor(opts: ConfigStoreOptions = {}) {
    super();
    this.#opts = opts;
    const stored = opts.shared?.snapshot() ?? opts.state?.load();
    if (stored) {
      this.#applied = new Map(stored.objects);
      this.#bindings = stored.bindings;
      this.#view = Object.freeze({ generation: stored.generation, objects: new Map(stored.objects) });
      this.#restored = stored.generation > 0;
    }
    opts.shared?.onChange((state) => this.#adopt(state));
  }

  view(): StoreView {
    return this.#view;
  }

  /** The served waypoint bindings as stored (waypoint-hold.ts), current with `view()`. */
  bindings(): Bindings {
    return this.#bindings;
  }

  /**
   * Writes binding changes that come with no config change (a held object released when its
   * waypoint ACKs), before they are served. Local store: at once, the generation unchanged.
   * Shared store: one transaction guarded by the view's generation, like `submit`; its commit
   * arrives as a 'change' (as from any replica), and one that lost a race is dropped (the
   * caller decides again on what won). One shared record is in flight at a time.
   */
  recordBindings(change: BindingsChange): BindingsRecord {
    const shared = this.#opts.shared;
    if (shared === undefined) {
      try {
        this.#opts.state?.commit({
          put: [],
          remove: [],
          generation: this.#view.generation,
          bindings: change,
        });
      } catch (e) {
        log.warn({ err: (e as Error).message }, 'could not record waypoint bindings; they stay held');
        return 'failed';
      }
      this.#bindings = change.after;
      return 'recorded';
    }
    if (this.#recording) return 'pending';
    this.#recording = true;
    const basedOn = this.#view.generation;
    const run = this.#submitting.then(() => this.#recordShared(shared, change, basedOn));
    this.#submitting = run.finally(() => {
      this.#recording = false;
    });
    return 'pending';
  }

  async #recordShared(shared: SharedStateStore, change: BindingsChange, basedOn: number): Promise<void> {
    if (this.#view.generation !== basedOn) return; // decided on a state that has moved on
    try {
      const generation = await shared.commitIf({ put: [], remove: [], bindings: change }, basedOn);
      if (generation === undefined) this.#adopt(await shared.refresh());
      else if (generation > this.#view.generation)
        this.#install({ ...this.#same(), bindings: change }, generation);
    } catch (e) {
      log.warn({ err: (e as Error).message }, 'could not record waypoint bindings; they stay held, retrying');
    }
  }

  /** The current objects as a change that changes none of them. */
  #same(): Omit<Prepared, 'bindings'> {
    return {
      files: this.#files,
      applied: this.#applied,
      // Views are never changed in place: the same map, so what was compiled for it holds.
      objects: this.#view.objects as Map<string, StoreObject>,
      changed: new Map(),
      put: [],
      remove: [],
    };
  }

  /**
   * Why the store cannot be read, if it cannot (the config directory gone or unreadable).
   * The view stays served; readiness reports this. Invalid content is not a store failure:
   * it is refused and the running config stays.
   */
  health(): string | undefined {
    return this.#unreadable ?? this.#commitFailure ?? this.#opts.shared?.health();
  }

  /**
   * Re-reads the directory; refused as a whole if any file is invalid. Reloads run one at
   * a time, so an older read never commits over a newer one.
   */
  reload(): Promise<Result<StoreView>> {
    const run = this.#reloading.then(() => this.#reloadNow());
    this.#reloading = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  async #reloadNow(): Promise<Result<StoreView>> {
    if (this.#opts.dir === undefined) {
      if (!this.#restored) return ok(this.#view);
      this.#restored = false;
      if (this.#opts.shared === undefined)
        return this.#commit(this.#files, this.#applied, new Map(), 'restore');
      // Committed (and admitted) by whichever replica wrote it: served as it is.
      this.emit('change', this.#view);
      return ok(this.#view);
    }
    const io: string[] = [];
    const read = await readDirectory(this.#opts.dir, io);
    this.#unreadable = io.length === 0 ? undefined : `config directory unreadable: ${io.join('; ')}`;
    if (!read.ok) return this.#reject(read.error, 'reload');
    const origins = new Map<string, string>();
    const files = collect(read.value, origins);
    if (!files.ok) return this.#reject(files.error, 'reload');
    return this.#commit(files.value, this.#applied, origins, 'reload');
  }

  /** Adds or replaces objects (by kind, namespace, name); refused as a whole if any is invalid. */
  apply(docs: readonly unknown[], source = 'apply'): Result<StoreView> {
    return this.#local({ apply: docs, source });
  }

  /**
   * Puts and removes objects in one commit, through the same admission: the Kubernetes
   * source's path (kubernetes/kube-source.ts), where the API server already holds the change.
   * A removed key the store does not hold is ignored.
   */
  sync(docs: readonly unknown[], removed: readonly string[], source: string): Result<StoreView> {
    const parsed = collect([{ source, docs }], new Map());
    if (!parsed.ok) return this.#reject(parsed.error, source);
    const applied = new Map(this.#applied);
    for (const key of removed) applied.delete(key);
    for (const [key, o] of parsed.value) applied.set(key, o);
    // The API server already holds these: a missing backend is status (ResolvedRefs=False,
    // kubernetes/kube-writer.ts) and a 500 for its share, as Gateway API says, not a refusal.
    return this.#commit(this.#files, applied, new Map(), source, { backendRefs: 'status' });
  }

  /** Parses multi-document YAML text and applies it. */
  applyYaml(text: string, source = 'apply'): Result<StoreView> {
    return this.#local({ applyYaml: text, source });
  }

  /**
   * Removes applied objects by `Kind/namespace/name`, all or none: a key that is not applied
   * (absent, or defined by a file of the config directory) refuses the whole delete, and so
   * does a removal admission refuses (a waypoint Gateway still named by use-waypoint).
   */
  remove(keys: readonly string[]): Result<StoreView> {
    return this.#local({ remove: keys });
  }

  /** Parses multi-document YAML and removes the objects it names (`zmesh delete -f`). */
  removeYaml(text: string, source = 'delete'): Result<StoreView> {
    return this.#local({ removeYaml: text, source });
  }

  /**
   * Any of the changes above, through whichever store this has: at once for a local one; for
   * a shared one, one transaction that commits only if no replica committed since this view
   * (else the view catches up and the change is recomputed and admitted again).
   */
  submit(edit: ConfigEdit): Promise<Result<StoreView> | StoreUnavailable> {
    const shared = this.#opts.shared;
    if (shared === undefined) return Promise.resolve(this.#local(edit));
    const run = this.#submitting.then(() => this.#submitShared(shared, edit));
    this.#submitting = run.catch(() => undefined);
    return run;
  }

  #local(edit: ConfigEdit): Result<StoreView> | StoreUnavailable {
    // What refusals are counted under: the operation, a bounded label (reasons name the file).
    const source = kindOf(edit);
    if (this.#opts.shared !== undefined)
      return this.#reject([`${source}: a shared store is changed through submit()`], source);
    const computed = this.#edit(edit);
    if (!computed.ok) return this.#reject(computed.error, source);
    return this.#commit(this.#files, computed.value.applied, computed.value.changed, source);
  }

  async #submitShared(
    shared: SharedStateStore,
    edit: ConfigEdit,
  ): Promise<Result<StoreView> | StoreUnavailable> {
    // What refusals are counted under: the operation, a bounded label (reasons name the file).
    const source = kindOf(edit);
    for (let attempt = 1; ; attempt++) {
      const computed = this.#edit(edit);
      if (!computed.ok) return this.#reject(computed.error, source);
      const prepared = this.#prepare(this.#files, computed.value.applied, computed.value.changed, source);
      if (!prepared.ok) return prepared;
      let generation: number | undefined;
      try {
        generation = await shared.commitIf(prepared.value, this.#view.generation);
      } catch (e) {
        return this.#unavailable((e as Error).message, source); // ZM_ERR_STATE_STORE's: names the store
      }
      if (generation !== undefined) {
        // The watch may have brought this commit (or a later one) already.
        if (generation > this.#view.generation) this.#install(prepared.value, generation);
        return ok(this.#view);
      }
      if (attempt >= MAX_SHARED_ATTEMPTS)
        return this.#reject([`state store: other replicas committed first ${attempt} times; retry`], source);
      log.info({ source, attempt }, 'another replica committed first; recomputing on its state');
      try {
        this.#adopt(await shared.refresh());
      } catch (e) {
        return this.#unavailable((e as Error).message, source);
      }
    }
  }

  /** What `edit` makes of the applied objects, computed from the current view. */
  #edit(edit: ConfigEdit): Result<Edit> {
    if ('remove' in edit) return this.#removal(edit.remove);
    let docs: readonly unknown[];
    if ('apply' in edit) docs = edit.apply;
    else {
      const text = 'applyYaml' in edit ? edit.applyYaml : edit.removeYaml;
      const parsedYaml = parseYaml(text, sourceOf(edit));
      if (!parsedYaml.ok) return parsedYaml;
      docs = parsedYaml.value;
    }
    const changed = new Map<string, string>();
    const parsed = collect([{ source: sourceOf(edit), docs }], changed);
    if (!parsed.ok) return parsed;
    if ('removeYaml' in edit) return this.#removal([...parsed.value.keys()]);
    return ok({ applied: new Map([...this.#applied, ...parsed.value]), changed });
  }

  #removal(keys: readonly string[]): Result<Edit> {
    const applied = new Map(this.#applied);
    const reasons: string[] = [];
    for (const key of keys) {
      if (applied.delete(key)) continue;
      const file = this.#files.has(key) ? this.#origins.get(key) : undefined;
      reasons.push(
        file === undefined
          ? `${key}: not found`
          : `${key}: defined in the config directory (${file}); remove it there`,
      );
    }
    return reasons.length > 0 ? err(reasons) : ok({ applied, changed: new Map() });
  }

  /** A state another replica committed (or a full re-read): replaces the applied objects, served at once. */
  #adopt(state: StoredState): void {
    if (state.generation <= this.#view.generation) return;
    const applied = new Map(state.objects);
    this.#install(
      {
        files: this.#files,
        applied,
        objects: new Map([...this.#files, ...applied]),
        changed: new Map(),
        put: [],
        remove: [],
        bindings: unchanged(state.bindings),
      },
      state.generation,
    );
  }

  watch(): void {
    if (this.#opts.dir === undefined || this.#watcher) return;
    this.#watcher = watch(this.#opts.dir, () => {
      clearTimeout(this.#debounce);
      this.#debounce = setTimeout(() => void this.reload(), this.#opts.debounceMs ?? DEFAULT_DEBOUNCE_MS);
    });
  }

  close(): void {
    clearTimeout(this.#debounce);
    this.#watcher?.close();
    this.#watcher = undefined;
  }

  #commit(
    files: Map<string, StoreObject>,
    applied: Map<string, StoreObject>,
    changed: ReadonlyMap<string, string>,
    source: string,
    checks: AdmitChecks = {},
  ): Result<StoreView> | StoreUnavailable {
    const prepared = this.#prepare(files, applied, changed, source, checks);
    if (!prepared.ok) return prepared;
    // On a shared store only the directory's files come here (reloads): the generation is the store's.
    const generation = this.#view.generation + (this.#opts.shared ? 0 : 1);
    try {
      this.#opts.state?.commit({
        put: prepared.value.put,
        remove: prepared.value.remove,
        generation,
        ...(changesBindings(prepared.value.bindings) ? { bindings: prepared.value.bindings } : {}),
      });
      this.#commitFailure = undefined;
    } catch (e) {
      this.#commitFailure = `state store ${this.#opts.state?.location} cannot be written: ${(e as Error).message}`;
      return this.#unavailable(`state store: ${(e as Error).message}`, source);
    }
    // A shared store's bindings are its own: what this reload would change is recorded by
    // the control plane (recordBindings), as a commit of the store.
    this.#install(
      this.#opts.shared ? { ...prepared.value, bindings: unchanged(this.#bindings) } : prepared.value,
      generation,
    );
    return ok(this.#view);
  }

  /** Admits the would-be view; what changed in `applied` becomes the store's put and remove. */
  #prepare(
    files: Map<string, StoreObject>,
    applied: Map<string, StoreObject>,
    changed: ReadonlyMap<string, string>,
    source: string,
    checks: AdmitChecks = {},
  ): Result<Prepared> {
    const objects = new Map([...files, ...applied]);
    const originOf = (key: string) => changed.get(key) ?? this.#origins.get(key);
    let refused = admit(objects, originOf, checks);
    if (refused.length === 0 && this.#opts.admit) refused = this.#opts.admit(objects, originOf);
    if (refused.length > 0) return this.#reject(refused, source);
    // Created once, kept through replacements (kubectl's AGE): a new object takes the old one's.
    const now = new Date().toISOString();
    for (const [key, o] of objects)
      o.metadata.creationTimestamp ??= this.#view.objects.get(key)?.metadata.creationTimestamp ?? now;
    const put = [...applied].filter(([k, o]) => this.#applied.get(k) !== o).map(([, o]) => o);
    const remove = [...this.#applied.keys()].filter((k) => !applied.has(k));
    const served = this.#opts.bindings?.(objects, this.#bindings);
    const bindings =
      served === undefined ? unchanged(this.#bindings) : bindingsChange(this.#bindings, served, true);
    return ok({ files, applied, objects, changed, put, remove, bindings });
  }

  #install(p: Prepared, generation: number): void {
    this.#files = p.files;
    this.#applied = p.applied;
    this.#bindings = p.bindings.after;
    this.#origins = new Map(
      [...p.objects.keys()].flatMap((k) => {
        const at = p.changed.get(k) ?? this.#origins.get(k);
        return at === undefined ? [] : [[k, at] as const];
      }),
    );
    this.#view = Object.freeze({ generation, objects: p.objects });
    this.emit('change', this.#view);
  }

  #unavailable(reason: string, source: string): StoreUnavailable {
    this.#reject([reason], source);
    return { ok: false, error: [reason], unavailable: true };
  }

  #reject<T>(reasons: string[], source: string): Result<T> {
    log.warn({ source, reasons }, 'config refused; running config unchanged');
    this.emit('rejected', reasons, source);
    return err(reasons);
  }
}

interface SourceDocs {
  source: string;
  docs: readonly unknown[];
}

/** Reads every YAML file of `dir`; I/O failures (not invalid content) also go to `io`. */
async function readDirectory(dir: string, io: string[]): Promise<Result<SourceDocs[]>> {
  const reasons: string[] = [];
  const out: SourceDocs[] = [];
  const listing = await readdir(dir).catch((e: Error) => e);
  if (listing instanceof Error) {
    io.push(`${dir}: ${listing.message}`);
    return err([`${dir}: ${listing.message}`]);
  }
  const names = listing.filter((n) => /\.ya?ml$/.test(n) && !n.startsWith('.')).sort();
  for (const name of names) {
    const path = join(dir, name);
    const text = await readFile(path).catch((e: Error) => e);
    if (text instanceof Error) {
      reasons.push(`${path}: ${text.message}`);
      io.push(`${path}: ${text.message}`);
    } else if (text.length > MAX_FILE_BYTES) reasons.push(`${path}: larger than ${MAX_FILE_BYTES} bytes`);
    else {
      const docs = parseYaml(text.toString('utf8'), path);
      if (docs.ok) out.push({ source: path, docs: docs.value });
      else reasons.push(...docs.error);
    }
  }
  return reasons.length > 0 ? err(reasons) : ok(out);
}

function kindOf(edit: ConfigEdit): 'apply' | 'delete' {
  return 'remove' in edit || 'removeYaml' in edit ? 'delete' : 'apply';
}

function sourceOf(edit: ConfigEdit): string {
  if ('remove' in edit) return 'delete';
  return edit.source ?? ('removeYaml' in edit ? 'delete' : 'apply');
}

function parseYaml(text: string, source: string): Result<unknown[]> {
  const reasons: string[] = [];
  const docs: unknown[] = [];
  parseAllDocuments(text).forEach((doc, i) => {
    if (doc.errors.length > 0) {
      reasons.push(...doc.errors.map((e) => `${source}#${i}: ${e.message}`));
      return;
    }
    // Parsing succeeds where building the value throws: an alias to no anchor, or aliases
    // that would expand without bound (yaml's resource-exhaustion check).
    try {
      docs.push(doc.toJS());
    } catch (e) {
      reasons.push(`${source}#${i}: ${(e as Error).message}`);
    }
  });
  return reasons.length > 0 ? err(reasons) : ok(docs);
}

function collect(
  sources: readonly SourceDocs[],
  origins: Map<string, string>,
): Result<Map<string, StoreObject>> {
  const reasons: string[] = [];
  const objects = new Map<string, StoreObject>();
  for (const { source, docs } of sources) {
    docs.forEach((doc, i) => {
      if (doc === null || doc === undefined) return;
      const problems: string[] = [];
      const object = parseObject(doc, problems);
      const where = `${source}#${i}${object ? ` (${object.kind} ${object.metadata.namespace}/${object.metadata.name})` : ''}`;
      reasons.push(...problems.map((p) => `${where}: ${p}`));
      if (object && problems.length === 0) {
        const key = objectKey(object);
        if (objects.has(key)) reasons.push(`${where}: defined twice`);
        objects.set(key, object);
        origins.set(key, where);
      }
    });
  }
  return reasons.length > 0 ? err(reasons) : ok(objects);
}
