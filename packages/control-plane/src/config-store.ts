import { EventEmitter } from 'node:events';
import { type FSWatcher, watch } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { err, logger, ok, type Result } from '@zmesh/shared';
import { parseAllDocuments } from 'yaml';
import { admit } from './admission.js';
import { objectKey, type StoreObject } from './k8s-objects.js';
import { parseObject } from './parse-object.js';
import type { StateStore } from './store/state-store.js';

const log = logger('config-store');

/** Editors write a file in several steps; one reload per burst. */
export const DEFAULT_DEBOUNCE_MS = 100;
/** Bounds what one reload reads, so a stray large file cannot stall the control plane. */
export const MAX_FILE_BYTES = 16 * 1024 * 1024;

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
   * Where applied objects and the generation are kept (store/). Loaded at construction
   * (ZM_ERR_STATE_STORE when it cannot be read); every accepted change is committed there
   * first, in one transaction, and a change the store refuses is refused.
   */
  state?: StateStore;
  /** Admission beyond `admit` (the control plane's compile-and-validate of waypoint configs); run once `admit` passes. */
  admit?: (
    objects: ReadonlyMap<string, StoreObject>,
    originOf: (key: string) => string | undefined,
  ) => string[];
}

/**
 * The control plane's configuration: a directory of YAML plus objects applied through
 * `apply` (the CLI's `zmesh apply -f`, the harness). Every reload or apply is all-or-nothing:
 * an invalid document refuses the whole change with file, field and reason, and the running
 * view stays. Before anything commits, `admit` (admission.ts) checks the whole would-be view
 * the way serving will: what it refuses is never stored. Events: 'change' (StoreView),
 * 'rejected' (reasons, source).
 */
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

  constructor(opts: ConfigStoreOptions = {}) {
    super();
    this.#opts = opts;
    if (opts.state) {
      const stored = opts.state.load();
      this.#applied = new Map(stored.objects);
      this.#view = Object.freeze({ generation: stored.generation, objects: new Map(stored.objects) });
      this.#restored = stored.generation > 0;
    }
  }

  view(): StoreView {
    return this.#view;
  }

  /**
   * Why the store cannot be read, if it cannot (the config directory gone or unreadable).
   * The view stays served; readiness reports this. Invalid content is not a store failure:
   * it is refused and the running config stays.
   */
  health(): string | undefined {
    return this.#unreadable;
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
      return this.#commit(this.#files, this.#applied, new Map(), 'restore');
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
    const origins = new Map<string, string>();
    const parsed = collect([{ source, docs }], origins);
    if (!parsed.ok) return this.#reject(parsed.error, 'apply');
    return this.#commit(this.#files, new Map([...this.#applied, ...parsed.value]), origins, 'apply');
  }

  /** Parses multi-document YAML text and applies it. */
  applyYaml(text: string, source = 'apply'): Result<StoreView> {
    const docs = parseYaml(text, source);
    return docs.ok ? this.apply(docs.value, source) : this.#reject(docs.error, 'apply');
  }

  /**
   * Removes applied objects by `Kind/namespace/name`, all or none: a key that is not applied
   * (absent, or defined by a file of the config directory) refuses the whole delete, and so
   * does a removal admission refuses (a waypoint Gateway still named by use-waypoint).
   */
  remove(keys: readonly string[]): Result<StoreView> {
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
    if (reasons.length > 0) return this.#reject(reasons, 'delete');
    return this.#commit(this.#files, applied, new Map(), 'delete');
  }

  /** Parses multi-document YAML and removes the objects it names (`zmesh delete -f`). */
  removeYaml(text: string, source = 'delete'): Result<StoreView> {
    const docs = parseYaml(text, source);
    if (!docs.ok) return this.#reject(docs.error, 'delete');
    const parsed = collect([{ source, docs: docs.value }], new Map());
    return parsed.ok ? this.remove([...parsed.value.keys()]) : this.#reject(parsed.error, 'delete');
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
  ): Result<StoreView> {
    const objects = new Map([...files, ...applied]);
    const originOf = (key: string) => changed.get(key) ?? this.#origins.get(key);
    let refused = admit(objects, originOf);
    if (refused.length === 0 && this.#opts.admit) refused = this.#opts.admit(objects, originOf);
    if (refused.length > 0) return this.#reject(refused, source);
    const generation = this.#view.generation + 1;
    const stored = this.#store(applied, generation);
    if (!stored.ok) return this.#reject(stored.error, source);
    this.#files = files;
    this.#applied = applied;
    this.#origins = new Map(
      [...objects.keys()].flatMap((k) => {
        const at = changed.get(k) ?? this.#origins.get(k);
        return at === undefined ? [] : [[k, at] as const];
      }),
    );
    this.#view = Object.freeze({ generation, objects });
    this.emit('change', this.#view);
    return ok(this.#view);
  }

  /** Commits what changed in `applied` (and the generation) to the state store, as one transaction. */
  #store(applied: ReadonlyMap<string, StoreObject>, generation: number): Result<void> {
    const state = this.#opts.state;
    if (state === undefined) return ok(undefined);
    const put = [...applied].filter(([k, o]) => this.#applied.get(k) !== o).map(([, o]) => o);
    const remove = [...this.#applied.keys()].filter((k) => !applied.has(k));
    try {
      state.commit({ put, remove, generation });
      return ok(undefined);
    } catch (e) {
      return err([`state store: ${(e as Error).message}`]);
    }
  }

  #reject(reasons: string[], source: string): Result<StoreView> {
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
