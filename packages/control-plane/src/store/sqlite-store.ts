import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { logger, ZmeshError } from '@zmesh/shared';
import { KINDS, objectKey, type StoreObject } from '../k8s-objects.js';
import {
  type StateChange,
  type StateStore,
  type StoredState,
  type StoreObserver,
  timed,
} from './state-store.js';

const log = logger('state-store');

/** The database file inside `--state-dir`. */
export const STATE_DB_FILE = 'zmesh-state.db';
/**
 * Bumped when the schema changes; an unknown newer version is refused, not guessed at.
 * 2: the served waypoint bindings (table `bindings`); a version-1 database gains it empty.
 */
const SCHEMA_VERSION = 2;

/** The part of `node:sqlite` (Node 22.5+) this store uses. */
interface Statement {
  run(...params: unknown[]): unknown;
  get(...params: unknown[]): Record<string, unknown> | undefined;
  all(...params: unknown[]): Record<string, unknown>[];
}
interface Database {
  exec(sql: string): void;
  prepare(sql: string): Statement;
  close(): void;
}
interface SqliteModule {
  DatabaseSync: new (path: string) => Database;
}

function sqliteModule(): SqliteModule | undefined {
  return process.getBuiltinModule('node:sqlite') as SqliteModule | undefined;
}

/** Whether this Node has `node:sqlite` (22.5 and later); the durable store needs it. */
export function sqliteAvailable(): boolean {
  return sqliteModule() !== undefined;
}

export { defaultStateDir } from './state-dir.js';

function storeError(dir: string, reason: string): ZmeshError {
  return new ZmeshError('ZM_ERR_STATE_STORE', { dir, reason });
}

/**
 * The embedded durable store: one SQLite database in `dir`, WAL with synchronous=FULL, one
 * transaction per change, so a `kill -9` at any instant leaves each apply wholly there or
 * absent. The database is held with an exclusive lock: a second control plane on the same
 * directory is refused instead of diverging. An unreadable or corrupt database is refused
 * (ZM_ERR_STATE_STORE), never replaced by an empty one.
 */
export class SqliteStateStore implements StateStore {
  readonly location: string;
  readonly backend = 'sqlite';
  readonly #dir: string;
  readonly #db: Database;
  #observer: StoreObserver | undefined;

  private constructor(dir: string, location: string, db: Database) {
    this.#dir = dir;
    this.location = location;
    this.#db = db;
  }

  static open(dir: string): SqliteStateStore {
    const sqlite = sqliteModule();
    if (sqlite === undefined)
      throw storeError(
        dir,
        `node:sqlite needs Node 22.5 or later (this is ${process.version}); or --no-state-dir`,
      );
    const location = join(dir, STATE_DB_FILE);
    let db: Database | undefined;
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      db = new sqlite.DatabaseSync(location);
      db.exec('PRAGMA locking_mode = EXCLUSIVE');
      db.exec('PRAGMA journal_mode = WAL');
      db.exec('PRAGMA synchronous = FULL');
      db.exec('PRAGMA busy_timeout = 0');
      const check = db.prepare('PRAGMA quick_check').all();
      const verdict = check.map((r) => String(Object.values(r)[0])).join('; ');
      if (verdict !== 'ok') throw new Error(`integrity check failed: ${verdict}`);
      migrate(db);
      return new SqliteStateStore(dir, location, db);
    } catch (e) {
      db?.close();
      if (e instanceof ZmeshError) throw e;
      throw storeError(dir, describe(e));
    }
  }

  observe(observer: StoreObserver): void {
    this.#observer = observer;
  }

  load(): StoredState {
    return timed(this.#observer, 'load', () => this.#load());
  }

  #load(): StoredState {
    try {
      const objects = new Map<string, StoreObject>();
      for (const row of this.#db.prepare('SELECT key, body FROM objects ORDER BY key').all()) {
        const key = String(row.key);
        const object = decodeObject(key, String(row.body));
        if (typeof object === 'string') throw new Error(`object ${key}: ${object}`);
        objects.set(key, object);
      }
      const generation = Number(this.#getMeta('generation') ?? '0');
      if (!Number.isSafeInteger(generation) || generation < 0)
        throw new Error(`generation is not a counter: ${generation}`);
      const bindings = new Map<string, string>();
      for (const row of this.#db.prepare('SELECT key, value FROM bindings ORDER BY key').all())
        bindings.set(String(row.key), String(row.value));
      return { objects, generation, bindings };
    } catch (e) {
      throw storeError(this.#dir, describe(e));
    }
  }

  commit(change: StateChange): void {
    timed(this.#observer, 'commit', () => this.#commit(change));
  }

  #commit(change: StateChange): void {
    this.#transaction(() => {
      const del = this.#db.prepare('DELETE FROM objects WHERE key = ?');
      for (const key of change.remove) del.run(key);
      const put = this.#db.prepare('INSERT OR REPLACE INTO objects (key, body) VALUES (?, ?)');
      for (const o of change.put) put.run(objectKey(o), JSON.stringify(o));
      if (change.bindings) {
        const unbind = this.#db.prepare('DELETE FROM bindings WHERE key = ?');
        for (const key of change.bindings.remove) unbind.run(key);
        const bind = this.#db.prepare('INSERT OR REPLACE INTO bindings (key, value) VALUES (?, ?)');
        for (const [key, value] of change.bindings.put) bind.run(key, value);
      }
      this.#setMeta('generation', String(change.generation));
    });
  }

  getMeta(key: string): string | undefined {
    return timed(this.#observer, 'read-meta', () => this.#getMeta(key));
  }

  #getMeta(key: string): string | undefined {
    const row = this.#db.prepare('SELECT value FROM meta WHERE key = ?').get(key);
    return row === undefined ? undefined : String(row.value);
  }

  putMeta(values: Readonly<Record<string, string>>): void {
    timed(this.#observer, 'write-meta', () =>
      this.#transaction(() => {
        for (const [k, v] of Object.entries(values)) this.#setMeta(k, v);
      }),
    );
  }

  close(): void {
    try {
      this.#db.close();
    } catch (e) {
      log.warn({ err: describe(e) }, 'closing the state store failed');
    }
  }

  #setMeta(key: string, value: string): void {
    this.#db.prepare('INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)').run(key, value);
  }

  #transaction(body: () => void): void {
    try {
      this.#db.exec('BEGIN IMMEDIATE');
    } catch (e) {
      throw storeError(this.#dir, describe(e));
    }
    try {
      body();
      this.#db.exec('COMMIT');
    } catch (e) {
      try {
        this.#db.exec('ROLLBACK');
      } catch {
        // Already rolled back by SQLite (e.g. a failed COMMIT); nothing was written.
      }
      throw storeError(this.#dir, describe(e));
    }
  }
}

/**
 * Creates or checks the schema inside a write transaction, which also takes the exclusive
 * lock (locking_mode=EXCLUSIVE keeps it) that keeps a second control plane out.
 */
function migrate(db: Database): void {
  db.exec('BEGIN IMMEDIATE');
  try {
    const version = Number(db.prepare('PRAGMA user_version').get()?.user_version ?? 0);
    if (version > SCHEMA_VERSION)
      throw new Error(`schema version ${version} is newer than this zmesh understands (${SCHEMA_VERSION})`);
    if (version < SCHEMA_VERSION)
      db.exec(`CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, body TEXT NOT NULL) STRICT;
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
        CREATE TABLE IF NOT EXISTS bindings (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
        PRAGMA user_version = ${SCHEMA_VERSION};`);
    db.exec('COMMIT');
  } catch (e) {
    db.exec('ROLLBACK');
    throw e;
  }
}

/** The object stored under `key`, or why it cannot be one (a store written by something else). */
export function decodeObject(key: string, body: string): StoreObject | string {
  let o: unknown;
  try {
    o = JSON.parse(body);
  } catch (e) {
    return describe(e);
  }
  if (typeof o !== 'object' || o === null) return 'not an object';
  const { kind, metadata } = o as { kind?: unknown; metadata?: { name?: unknown; namespace?: unknown } };
  if (!KINDS.includes(kind as StoreObject['kind'])) return `unknown kind ${String(kind)}`;
  if (typeof metadata?.name !== 'string' || typeof metadata.namespace !== 'string') return 'no metadata';
  const object = o as StoreObject;
  return objectKey(object) === key ? object : `stored under the wrong key (it is ${objectKey(object)})`;
}

function describe(e: unknown): string {
  const message = e instanceof Error ? e.message : String(e);
  return /database is locked/.test(message)
    ? `${message}: another control plane is using this state directory`
    : message;
}
