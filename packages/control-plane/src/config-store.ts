import { EventEmitter } from 'node:events';
import { type FSWatcher, watch } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { err, logger, ok, type Result } from '@zmesh/shared';
import { parseAllDocuments } from 'yaml';
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
}

/**
 * The control plane's configuration: a directory of YAML plus objects applied through
 * `apply` (the CLI's `zmesh apply -f`, the harness). Every reload or apply is all-or-nothing:
 * an invalid document refuses the whole change with file, field and reason, and the running
 * view stays. Events: 'change' (StoreView), 'rejected' (reasons).
 */
export class ConfigStore extends EventEmitter {
  readonly #opts: ConfigStoreOptions;
  #files = new Map<string, StoreObject>();
  #applied = new Map<string, StoreObject>();
  #view: StoreView = { generation: 0, objects: new Map() };
  #watcher: FSWatcher | undefined;
  #debounce: NodeJS.Timeout | undefined;
  #reloading: Promise<void> = Promise.resolve();
  /** Restored from a store with history: the first reload commits it, so it is compiled and served. */
  #restored = false;

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
      return this.#commit(this.#files, this.#applied);
    }
    const read = await readDirectory(this.#opts.dir);
    if (!read.ok) return this.#reject(read.error);
    const files = collect(read.value);
    if (!files.ok) return this.#reject(files.error);
    return this.#commit(files.value, this.#applied);
  }

  /** Adds or replaces objects (by kind, namespace, name); refused as a whole if any is invalid. */
  apply(docs: readonly unknown[], source = 'apply'): Result<StoreView> {
    const parsed = collect([{ source, docs }]);
    if (!parsed.ok) return this.#reject(parsed.error);
    return this.#commit(this.#files, new Map([...this.#applied, ...parsed.value]));
  }

  /** Parses multi-document YAML text and applies it. */
  applyYaml(text: string, source = 'apply'): Result<StoreView> {
    const docs = parseYaml(text, source);
    return docs.ok ? this.apply(docs.value, source) : this.#reject(docs.error);
  }

  /** Removes applied objects by `Kind/namespace/name`. */
  remove(keys: readonly string[]): Result<StoreView> {
    const applied = new Map(this.#applied);
    for (const key of keys) applied.delete(key);
    return this.#commit(this.#files, applied);
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

  #commit(files: Map<string, StoreObject>, applied: Map<string, StoreObject>): Result<StoreView> {
    const objects = new Map([...files, ...applied]);
    const conflicts = crossChecks(objects);
    if (conflicts.length > 0) return this.#reject(conflicts);
    const generation = this.#view.generation + 1;
    const stored = this.#store(applied, generation);
    if (!stored.ok) return this.#reject(stored.error);
    this.#files = files;
    this.#applied = applied;
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

  #reject(reasons: string[]): Result<StoreView> {
    log.warn({ reasons }, 'config refused; running config unchanged');
    this.emit('rejected', reasons);
    return err(reasons);
  }
}

interface SourceDocs {
  source: string;
  docs: readonly unknown[];
}

async function readDirectory(dir: string): Promise<Result<SourceDocs[]>> {
  const reasons: string[] = [];
  const out: SourceDocs[] = [];
  const listing = await readdir(dir).catch((e: Error) => e);
  if (listing instanceof Error) return err([`${dir}: ${listing.message}`]);
  const names = listing.filter((n) => /\.ya?ml$/.test(n) && !n.startsWith('.')).sort();
  for (const name of names) {
    const path = join(dir, name);
    const text = await readFile(path).catch((e: Error) => e);
    if (text instanceof Error) reasons.push(`${path}: ${text.message}`);
    else if (text.length > MAX_FILE_BYTES) reasons.push(`${path}: larger than ${MAX_FILE_BYTES} bytes`);
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
    if (doc.errors.length > 0) reasons.push(...doc.errors.map((e) => `${source}#${i}: ${e.message}`));
    else docs.push(doc.toJS());
  });
  return reasons.length > 0 ? err(reasons) : ok(docs);
}

function collect(sources: readonly SourceDocs[]): Result<Map<string, StoreObject>> {
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
      }
    });
  }
  return reasons.length > 0 ? err(reasons) : ok(objects);
}

/** Two pods with one IP would make source attribution ambiguous: refuse. */
function crossChecks(objects: ReadonlyMap<string, StoreObject>): string[] {
  const owner = new Map<string, string>();
  const reasons: string[] = [];
  for (const [key, o] of objects) {
    if (o.kind !== 'Pod') continue;
    for (const ip of o.status.podIPs) {
      const other = owner.get(ip);
      if (other !== undefined) reasons.push(`${key}: status.podIPs: ${ip} is also the IP of ${other}`);
      else owner.set(ip, key);
    }
  }
  return reasons;
}
