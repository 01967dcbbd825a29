import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADDRESS_TYPE_URL, isZmeshError } from '@zmesh/shared';
import test from 'ava';
import { ConfigStore } from '../config-store.js';
import { ControlPlane } from '../control-plane.js';
import { NAMESPACE_YAML, podYaml } from '../testing/fixtures.js';
import { SqliteStateStore, STATE_DB_FILE, sqliteAvailable } from './sqlite-store.js';
import { MemoryStateStore } from './state-store.js';

const SKIP = sqliteAvailable() ? undefined : `node:sqlite needs Node 22.5+, this is ${process.version}`;
/** Runs only where node:sqlite exists; elsewhere logs why and skips (never reported as passed). */
const sqliteTest = SKIP === undefined ? test : test.skip;
if (SKIP !== undefined) test.skip(`sqlite store tests skipped: ${SKIP}`, () => {});

async function stateDir(t: { teardown: (f: () => Promise<void>) => void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-state-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

sqliteTest('applied objects and the generation survive reopening the store', async (t) => {
  const dir = await stateDir(t);
  const first = SqliteStateStore.open(dir);
  const store = new ConfigStore({ state: first });
  t.true(
    store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1'), podYaml('b', '10.1.0.2')].join('---\n')).ok,
  );
  t.true(store.remove(['Pod/ns1/b']).ok);
  const generation = store.view().generation;
  first.close();

  const reopened = new ConfigStore({ state: SqliteStateStore.open(dir) });
  t.is(reopened.view().generation, generation);
  t.deepEqual([...reopened.view().objects.keys()].sort(), ['Namespace//ns1', 'Pod/ns1/a']);
  t.deepEqual(reopened.view().objects.get('Pod/ns1/a'), store.view().objects.get('Pod/ns1/a'));
});

sqliteTest('a refused apply writes nothing', async (t) => {
  const dir = await stateDir(t);
  const state = SqliteStateStore.open(dir);
  const store = new ConfigStore({ state });
  t.true(store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n')).ok);
  // Same IP as pod a: refused by admission, before the store.
  t.false(store.applyYaml([podYaml('c', '10.1.0.3'), podYaml('d', '10.1.0.1')].join('---\n')).ok);
  t.deepEqual([...state.load().objects.keys()].sort(), ['Namespace//ns1', 'Pod/ns1/a']);
  state.close();
});

sqliteTest('a second control plane on the same state directory is refused', async (t) => {
  const dir = await stateDir(t);
  const first = SqliteStateStore.open(dir);
  t.teardown(() => first.close());
  const e = t.throws(() => SqliteStateStore.open(dir));
  t.true(isZmeshError(e, 'ZM_ERR_STATE_STORE'));
  t.regex(e.message, /another control plane/);
});

sqliteTest(
  'a corrupt database is refused with ZM_ERR_STATE_STORE, never replaced by an empty one',
  async (t) => {
    const dir = await stateDir(t);
    await writeFile(join(dir, STATE_DB_FILE), Buffer.alloc(8192, 'not a database'));
    const e = t.throws(() => SqliteStateStore.open(dir));
    t.true(isZmeshError(e, 'ZM_ERR_STATE_STORE'));
    t.regex(e.message, new RegExp(`state store ${dir}`));
  },
);

sqliteTest('an object that is not an object of its key is refused at load', async (t) => {
  const dir = await stateDir(t);
  const state = SqliteStateStore.open(dir);
  state.commit({
    put: [{ kind: 'Namespace', metadata: { name: 'ns1', namespace: '', labels: {} } }],
    remove: [],
    generation: 1,
  });
  state.close();
  const sqlite = process.getBuiltinModule('node:sqlite') as {
    DatabaseSync: new (p: string) => { exec(sql: string): void; close(): void };
  };
  const db = new sqlite.DatabaseSync(join(dir, STATE_DB_FILE));
  db.exec(`UPDATE objects SET body = '{"kind":"Nope"}'`);
  db.close();
  const reopened = SqliteStateStore.open(dir);
  t.teardown(() => reopened.close());
  const e = t.throws(() => reopened.load());
  t.true(isZmeshError(e, 'ZM_ERR_STATE_STORE'));
  t.regex(e.message, /Namespace\/\/ns1: unknown kind Nope/);
});

sqliteTest('the node-token key is kept: tokens issued before a restart stay valid', async (t) => {
  const dir = await stateDir(t);
  const first = new ControlPlane({ trustDomain: 'cluster.local', state: SqliteStateStore.open(dir) });
  const token = first.issueNodeToken('node-a');
  await first.stop();
  const second = new ControlPlane({ trustDomain: 'cluster.local', state: SqliteStateStore.open(dir) });
  t.teardown(() => second.stop());
  t.is(second.tokens.verify(token), 'node-a');
});

test('the memory store forgets nothing within a process and keeps named values', (t) => {
  const state = new MemoryStateStore();
  const store = new ConfigStore({ state });
  t.true(store.applyYaml(NAMESPACE_YAML).ok);
  t.deepEqual([...state.load().objects.keys()], ['Namespace//ns1']);
  t.is(state.load().generation, store.view().generation);
  state.putMeta({ a: '1', b: '2' });
  t.is(state.getMeta('b'), '2');
});

test('a commit the store refuses refuses the apply; the running view stays', (t) => {
  const state = new MemoryStateStore();
  const store = new ConfigStore({ state });
  t.true(store.applyYaml(NAMESPACE_YAML).ok);
  const before = store.view();
  state.commit = () => {
    throw new Error('disk full');
  };
  const r = store.applyYaml(podYaml('a', '10.1.0.1'));
  t.false(r.ok);
  if (!r.ok) t.regex(r.error.join(), /state store: disk full/);
  t.is(store.view(), before);
});

sqliteTest(
  'a control plane restarted from its store serves the restored objects, versions carrying on',
  async (t) => {
    const dir = await stateDir(t);
    const first = new ControlPlane({ trustDomain: 'cluster.local', state: SqliteStateStore.open(dir) });
    await first.start();
    t.true(first.store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n')).ok);
    const before = first.server.cache.view(ADDRESS_TYPE_URL);
    t.is(before.resources.size, 1);
    await first.stop();

    const second = new ControlPlane({ trustDomain: 'cluster.local', state: SqliteStateStore.open(dir) });
    t.teardown(() => second.stop());
    await second.start();
    const after = second.server.cache.view(ADDRESS_TYPE_URL);
    t.deepEqual(
      [...after.resources.keys()],
      [...before.resources.keys()],
      'compiled and served, not only stored',
    );
    t.true(after.version > before.version, `version ${before.version} -> ${after.version}`);
  },
);

/** The value of one series of `/metrics` text, or undefined when the series is absent. */
function series(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

sqliteTest(
  'store latency: each apply adds a timed sqlite commit to zmesh_cp_store_operation_seconds',
  async (t) => {
    const dir = await stateDir(t);
    const cp = new ControlPlane({ trustDomain: 'cluster.local', state: SqliteStateStore.open(dir) });
    t.teardown(() => cp.stop());
    await cp.start();
    const scrape = () => cp.metrics.registry.metrics();
    const name = 'zmesh_cp_store_operation_seconds';
    const commit = 'backend="sqlite",op="commit",outcome="ok"';
    const before = await scrape();
    t.is(series(before, `${name}_count`, 'backend="sqlite",op="load",outcome="ok"'), 1, 'the load is timed');
    const commits = series(before, `${name}_count`, commit) ?? 0;
    const seconds = series(before, `${name}_sum`, commit) ?? 0;
    t.true((await cp.store.submit({ applyYaml: NAMESPACE_YAML })).ok);
    const after = await scrape();
    t.is(series(after, `${name}_count`, commit), commits + 1, 'one commit per apply');
    t.true((series(after, `${name}_sum`, commit) ?? 0) > seconds, 'its time is added');
    t.is(series(after, `${name}_bucket`, `le="+Inf",${commit}`), commits + 1);
    t.false(/backend="(etcd|memory)"/.test(after), 'only the backend in use');
  },
);

sqliteTest(
  'served waypoint bindings commit with the objects, all or nothing; a version-1 database gains their table',
  async (t) => {
    const dir = await stateDir(t);
    const ns = (name: string) => ({
      kind: 'Namespace' as const,
      metadata: { name, namespace: '', labels: {} },
    });
    const bind = (put: Array<[string, string]>, remove: string[] = []) => ({
      put: new Map(put),
      remove,
      after: new Map(put),
    });
    const first = SqliteStateStore.open(dir);
    first.commit({
      put: [ns('a')],
      remove: [],
      generation: 1,
      bindings: bind([
        ['a/w/p', ''],
        ['a/s/h', '{}'],
      ]),
    });
    first.commit({ put: [], remove: [], generation: 1, bindings: bind([['a/w/p', '{"x":1}']], ['a/s/h']) });
    // A binding the schema refuses (NOT NULL) rolls back the objects of its commit too.
    t.throws(() =>
      first.commit({
        put: [ns('b')],
        remove: [],
        generation: 2,
        bindings: bind([['b/w/q', null as unknown as string]]),
      }),
    );
    first.close();
    const reopened = SqliteStateStore.open(dir);
    const state = reopened.load();
    t.deepEqual([...state.objects.keys()], ['Namespace//a']);
    t.is(state.generation, 1);
    t.deepEqual([...state.bindings], [['a/w/p', '{"x":1}']]);
    reopened.close();

    // The database as zmesh wrote it before bindings were stored.
    const sqlite = process.getBuiltinModule('node:sqlite') as {
      DatabaseSync: new (p: string) => { exec(sql: string): void; close(): void };
    };
    const db = new sqlite.DatabaseSync(join(dir, STATE_DB_FILE));
    db.exec('DROP TABLE bindings; PRAGMA user_version = 1;');
    db.close();
    const upgraded = SqliteStateStore.open(dir);
    t.teardown(() => upgraded.close());
    t.deepEqual([...upgraded.load().objects.keys()], ['Namespace//a'], 'objects kept');
    t.is(upgraded.load().bindings.size, 0, 'no bindings yet: served as compiled');
    upgraded.commit({ put: [], remove: [], generation: 1, bindings: bind([['a/w/p', '']]) });
    t.deepEqual([...upgraded.load().bindings], [['a/w/p', '']]);
  },
);
