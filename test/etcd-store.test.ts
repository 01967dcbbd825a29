import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ConfigStore, ControlPlane, sharedNodeTokenKey } from '@zmesh/control-plane';
import { EtcdStateStore, parseEtcdUrl } from '@zmesh/control-plane/etcd';
import test from 'ava';
import { execa } from 'execa';
import { type EtcdCluster, etcdUnavailable, startEtcdCluster } from './helpers/etcd.js';

/** 127.133.1.0/24 is this file's (etcd members). */
const HOST = '127.133.1.1';
const unavailable = etcdUnavailable();
let cluster: EtcdCluster | undefined;
const opened: EtcdStateStore[] = [];

if (unavailable) test.skip(`etcd store tests skipped: ${unavailable}`, () => {});
else {
  test.before(async () => {
    cluster = await startEtcdCluster(HOST, 3);
  });
  test.after.always(async () => {
    for (const s of opened) await s.close();
    await cluster?.stop();
  });
}
const run = unavailable ? test.serial.skip : test.serial;

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

async function replica(): Promise<{ store: EtcdStateStore; config: ConfigStore }> {
  const store = await EtcdStateStore.open(cluster!.url);
  opened.push(store);
  return { store, config: new ConfigStore({ shared: store }) };
}

const ns = (name: string) => `kind: Namespace\nmetadata: { name: ${name} }\n`;

async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('etcd:// URLs: members listed, anything else refused with the reason', (t) => {
  t.deepEqual(parseEtcdUrl('etcd://127.0.0.1:2379,[::1]:2380'), [
    'http://127.0.0.1:2379',
    'http://[::1]:2380',
  ]);
  for (const bad of ['http://a:1', 'etcd://', 'etcd://host', 'etcd://a:1,,b:2', 'etcd://a:1/x'])
    t.throws(() => parseEtcdUrl(bad), { message: /ZM_ERR_STATE_STORE|cannot be used/ }, bad);
});

test('zmesh control-plane --store: a bad URL, an unreachable etcd or --state-dir or --kubernetes beside it is one line and exit 1', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-etcd-cli-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const cases: Array<[string[], RegExp]> = [
    [['--store', 'http://a:1'], /ZM_ERR_STATE_STORE: .*expected etcd:\/\/host:port/],
    // Nothing listens on port 1: refused at once, never an empty start.
    [
      ['--store', 'etcd://127.133.1.9:1'],
      /ZM_ERR_STATE_STORE: state store etcd:\/\/127\.133\.1\.9:1 cannot be used: .*ECONNREFUSED/,
    ],
    [
      ['--store', 'etcd://127.133.1.9:1', '--state-dir', join(dir, 's')],
      /ZM_ERR_CONFIG_INVALID: .*--state-dir: not with --store/,
    ],
    // Controller mode's objects live in the API server; a shared commit would replace them.
    [
      ['--store', 'etcd://127.133.1.9:1', '--kubernetes', '--kubeconfig', join(dir, 'k')],
      /ZM_ERR_CONFIG_INVALID: .*--store: not with --kubernetes/,
    ],
  ];
  for (const [args, reason] of cases) {
    const r = await execa(
      ZMESH,
      ['control-plane', ...args, '--port', '0', '--admin-socket', join(dir, 'a.sock')],
      {
        reject: false,
        timeout: 20_000,
      },
    );
    t.is(r.exitCode, 1, args.join(' '));
    const lines = r.stderr.trim().split('\n');
    t.is(lines.length, 1, r.stderr);
    t.regex(lines[0]!, reason);
  }
});

run('an apply on one replica reaches the other through the watch, at the same generation', async (t) => {
  const a = await replica();
  const b = await replica();
  const applied = await a.config.submit({ applyYaml: ns('one') });
  t.true(applied.ok);
  const generation = applied.ok ? applied.value.generation : 0;
  await until('replica b to see it', () => b.config.view().generation === generation);
  t.true(b.config.view().objects.has('Namespace//one'));
  const removed = await b.config.submit({ remove: ['Namespace//one'] });
  t.true(removed.ok);
  await until('replica a to see the delete', () => !a.config.view().objects.has('Namespace//one'));
  t.is(a.config.view().generation, b.config.view().generation);
  // A third replica started now loads the same state at the same generation.
  const c = await replica();
  t.is(c.config.view().generation, b.config.view().generation);
});

run('concurrent applies on two replicas: both committed, none overwrites the other', async (t) => {
  const a = await replica();
  const b = await replica();
  const results = await Promise.all(
    Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).config.submit({ applyYaml: ns(`c-${i}`) })),
  );
  t.true(
    results.every((r) => r.ok),
    JSON.stringify(results.filter((r) => !r.ok)),
  );
  const fresh = await replica();
  for (let i = 0; i < 10; i++) t.true(fresh.config.view().objects.has(`Namespace//c-${i}`), `c-${i}`);
  const generations = results.map((r) => (r.ok ? r.value.generation : 0));
  t.is(new Set(generations).size, generations.length, 'each apply is its own commit');
});

run('a refused apply writes nothing; the sync methods refuse on a shared store', async (t) => {
  const a = await replica();
  const before = a.config.view().generation;
  const refused = await a.config.submit({
    applyYaml: 'kind: Pod\nmetadata: { name: p, namespace: nowhere }\n',
  });
  t.false(refused.ok);
  t.is((await a.store.refresh()).generation, before);
  const sync = a.config.applyYaml(ns('x'));
  t.false(sync.ok);
  t.regex(sync.ok ? '' : sync.error.join(), /through submit/);
});

run('a named value is created once, whichever replica asks first', async (t) => {
  const a = await replica();
  const b = await replica();
  const [x, y] = await Promise.all([
    a.store.metaOrCreate('k', async () => 'from-a'),
    b.store.metaOrCreate('k', async () => 'from-b'),
  ]);
  t.is(x, y);
  t.is(await a.store.metaOrCreate('k', async () => 'later'), x);
});

run(
  "a replica's config directory is its own: served beside the shared objects, never written to etcd",
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-etcd-dir-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, 'ns.yaml'), ns('from-file'));
    const a = await replica();
    const withDir = new ConfigStore({ shared: a.store, dir });
    const loaded = await withDir.reload();
    t.true(loaded.ok);
    t.true(withDir.view().objects.has('Namespace//from-file'));
    const generation = withDir.view().generation;
    t.is(generation, (await a.store.refresh()).generation, "a reload keeps the store's generation");
    t.false(a.store.snapshot().objects.has('Namespace//from-file'), 'files are not written to etcd');
    const b = await replica();
    const applied = await b.config.submit({ applyYaml: ns('from-b') });
    t.true(applied.ok);
    await until('the shared apply to reach the replica with a directory', () =>
      withDir.view().objects.has('Namespace//from-b'),
    );
    t.true(withDir.view().objects.has('Namespace//from-file'), 'its files stay served');
  },
);

/** The value of one series of `/metrics` text (0 when the series is absent). */
function series(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

run(
  'store latency: an apply is a timed etcd commit on its replica and a timed watch-apply on the other',
  async (t) => {
    const planes: ControlPlane[] = [];
    t.teardown(async () => {
      for (const cp of planes) await cp.stop();
    });
    for (let i = 0; i < 2; i++) {
      const store = await EtcdStateStore.open(cluster!.url);
      const cp = new ControlPlane({
        trustDomain: 'cluster.local',
        shared: store,
        tokenKey: await sharedNodeTokenKey(store),
      });
      planes.push(cp);
      await cp.start();
    }
    const [a, b] = planes as [ControlPlane, ControlPlane];
    const name = 'zmesh_cp_store_operation_seconds';
    const commit = 'backend="etcd",op="commit",outcome="ok"';
    const watched = 'backend="etcd",op="watch-apply",outcome="ok"';
    const [aBefore, bBefore] = [await a.metrics.registry.metrics(), await b.metrics.registry.metrics()];
    const applied = await a.store.submit({ applyYaml: ns('timed') });
    t.true(applied.ok);
    const generation = applied.ok ? applied.value.generation : 0;
    await until('replica b to serve it', () => b.store.view().generation === generation);
    const [aAfter, bAfter] = [await a.metrics.registry.metrics(), await b.metrics.registry.metrics()];
    t.is(series(aAfter, `${name}_count`, commit), series(aBefore, `${name}_count`, commit) + 1, 'one commit');
    t.true(series(aAfter, `${name}_sum`, commit) > series(aBefore, `${name}_sum`, commit), 'its time added');
    t.true(
      series(bAfter, `${name}_count`, watched) > series(bBefore, `${name}_count`, watched),
      'the other replica timed applying the watched commit',
    );
    t.is(
      series(bAfter, `${name}_count`, commit),
      series(bBefore, `${name}_count`, commit),
      'b committed nothing',
    );
    t.false(
      /zmesh_cp_store_operation_seconds_count\{backend="sqlite"/.test(aAfter),
      'only the backend in use',
    );
  },
);

run(
  'served waypoint bindings: replicated with their commit, a namespace of 200 is one txn operation, a lost race writes nothing',
  async (t) => {
    const a = await replica();
    const b = await replica();
    const change = (put: Map<string, string>, remove: string[], after: Map<string, string>) => ({
      put: [],
      remove: [],
      bindings: { put, remove, after },
    });
    // 200 bindings of one namespace: more than etcd's 128 operations if each were a key.
    const many = new Map(Array.from({ length: 200 }, (_, i) => [`bind-1/w/p${i}`, i % 2 ? '' : '{"x":1}']));
    many.set('bind-2/s/h', '');
    const basedOn = a.store.snapshot().generation;
    const generation = await a.store.commitIf(change(many, [], many), basedOn);
    t.truthy(generation);
    await until(
      'replica b to see the bindings',
      () => b.config.bindings().get('bind-1/w/p198') === '{"x":1}',
    );
    t.is(b.config.view().generation, generation!);
    t.deepEqual(
      [...b.store.snapshot().bindings].filter(([k]) => k.startsWith('bind-')).sort(),
      [...many].sort(),
    );
    // The lost race: based on the old generation, refused, nothing written.
    const stale = new Map([['bind-2/s/h', '{"x":2}']]);
    t.is(await b.store.commitIf(change(stale, [], new Map([...many, ...stale])), basedOn), undefined);
    // Emptying a namespace removes its group; the other stays.
    const left = new Map([['bind-2/s/h', '']]);
    const removed = await b.store.commitIf(
      change(
        new Map(),
        [...many.keys()].filter((k) => k.startsWith('bind-1/')),
        left,
      ),
      generation!,
    );
    t.truthy(removed);
    await until('replica a to see the removal', () => a.config.view().generation === removed);
    t.deepEqual(
      [...a.config.bindings()].filter(([k]) => k.startsWith('bind-')),
      [['bind-2/s/h', '']],
    );
    const c = await replica();
    t.deepEqual(
      [...c.store.snapshot().bindings].filter(([k]) => k.startsWith('bind-')),
      [['bind-2/s/h', '']],
    );
  },
);
