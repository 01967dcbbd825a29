import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ControlPlane,
  SqliteStateStore,
  STATE_DB_FILE,
  sharedNodeTokenKey,
  sqliteAvailable,
} from '@zmesh/control-plane';
import { EtcdStateStore } from '@zmesh/control-plane/etcd';
import { baseDocs, podDoc } from '@zmesh/harness';
import { ADDRESS_TYPE_URL, type ConfigSnapshot, XdsClient } from '@zmesh/shared';
import { decodeWaypointConfig, WaypointXdsSource } from '@zmesh/waypoint';
import test, { type ExecutionContext } from 'ava';
import { type EtcdCluster, etcdUnavailable, startEtcdCluster } from './helpers/etcd.js';

/**
 * The transition hold (waypoint-hold.ts) decided from the store's last-served bindings: a
 * restart and a second replica hold and release exactly as the control plane that served.
 * 127.181.0.0/16 is this file's: control planes .0.x, the waypoint pod .3.1, etcd .9.1.
 */
const BLOCK = 181;
const ip = (s: string) => `127.${BLOCK}.${s}`;
const TRUST = { trustDomain: 'cluster.local' };
const TOKEN_KEY = Buffer.alloc(32, 5);
const SERVER = 'Kubernetes//Pod/team-b/server';
const WP = 'wp.team-b.svc.cluster.local';
const HELD = [
  ['Pod/team-b/server', 'team-b/wp', undefined],
  ['Service/team-b/server', 'team-b/wp', undefined],
];

const yamlOf = (docs: unknown[]) => docs.map((d) => JSON.stringify(d)).join('\n---\n');
/** team-a's client, team-b's server and its Service (direct), a waypoint Gateway and its pod. */
const MESH = yamlOf([
  ...baseDocs(BLOCK),
  {
    kind: 'Gateway',
    metadata: { name: 'wp', namespace: 'team-b' },
    spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: ip('3.1') }] },
  },
  podDoc('team-b', 'wp', ip('3.1'), 'node-w', { 'gateway.networking.k8s.io/gateway-name': 'wp' }),
]);
/** `ns l7 on team-b`: the namespace's traffic bound to the waypoint. */
const L7_ON = yamlOf([
  {
    kind: 'Namespace',
    metadata: {
      name: 'team-b',
      labels: { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'wp' },
    },
  },
]);

const heldOf = (cp: ControlPlane) => cp.heldUsers().map((h) => [h.object, h.waypoint, h.keptOn]);
/** The waypoints the server pod's traffic crosses, as served (a held pod's are its previous ones). */
const servedPath = (cp: ControlPlane) => cp.explainPod('team-b', 'server')?.waypoints;

async function until(what: string, cond: () => boolean, ms = 8000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A ztunnel's xDS side on node-b: what it is served for the server pod. */
function ztunnel(t: ExecutionContext, cp: ControlPlane, address: string): XdsClient {
  const client = new XdsClient({
    address,
    node: { id: `ztunnel~${ip('0.2')}~ztunnel-b.istio-system~istio-system.svc.cluster.local` },
    token: cp.issueNodeToken('node-b'),
    typeUrls: [ADDRESS_TYPE_URL],
    backoff: { initialMs: 20, maxMs: 200 },
  });
  t.teardown(() => client.stop());
  client.start();
  return client;
}
const serverWaypoint = (s: ConfigSnapshot) => s.workloads.get(SERVER)?.waypoint?.hostname?.hostname;

/** The waypoint's xDS side for team-b/wp: it ACKs the Gateway's config, which makes the waypoint ready. */
function waypoint(t: ExecutionContext, cp: ControlPlane, address: string): WaypointXdsSource {
  const source = new WaypointXdsSource({
    address,
    resourceName: 'team-b/wp',
    node: { id: `waypoint~${ip('3.1')}~wp.team-b~svc.cluster.local` },
    token: cp.issueNodeToken('node-w'),
    apply: (doc, from) => decodeWaypointConfig(doc, from),
    backoff: { initialMs: 20, maxMs: 200 },
  });
  t.teardown(() => source.stop());
  source.start();
  return source;
}

const noSqlite = sqliteAvailable()
  ? undefined
  : `the durable store needs node:sqlite (Node 22.5+), this is ${process.version}`;
if (noSqlite) test.skip(`sqlite waypoint-hold tests skipped: ${noSqlite}`, () => {});
const sqliteTest = noSqlite ? test.serial.skip : test.serial;

/** A control plane on the sqlite store in `dir`, serving on this file's `host`. */
async function startLocal(t: ExecutionContext, dir: string, host: string) {
  const cp = new ControlPlane({ ...TRUST, tokenKey: TOKEN_KEY, state: SqliteStateStore.open(dir) });
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await cp.stop();
  };
  t.teardown(stop);
  const port = await cp.start(0, host);
  return { cp, address: `${host}:${port}`, stop };
}

async function stateDir(t: ExecutionContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-hold-state-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A sqlite control plane that served the mesh, then `ns l7 on team-b` with no waypoint ACK: held. */
async function heldOnDirectPath(t: ExecutionContext) {
  const dir = await stateDir(t);
  const first = await startLocal(t, dir, ip('0.1'));
  t.true(first.cp.store.applyYaml(MESH).ok);
  t.true(first.cp.store.applyYaml(L7_ON).ok);
  t.deepEqual(heldOf(first.cp), HELD, 'no waypoint has ACKed: held on the direct path');
  return { dir, first };
}

sqliteTest(
  'sqlite: a control plane restarted while a namespace is held on its direct path keeps holding it, and switches on the waypoint ACK',
  async (t) => {
    const { dir, first } = await heldOnDirectPath(t);
    await first.stop();

    const restarted = await startLocal(t, dir, ip('0.1'));
    t.deepEqual(heldOf(restarted.cp), HELD, 'still held after the restart');
    const z = ztunnel(t, restarted.cp, restarted.address);
    const direct = await until('the ztunnel to be served', () => z.snapshot().workloads.has(SERVER)).then(
      () => z.snapshot(),
    );
    t.is(serverWaypoint(direct), undefined, 'the ztunnel is served the direct path, not a cut one');
    t.deepEqual(servedPath(restarted.cp), []);

    waypoint(t, restarted.cp, restarted.address);
    await until('the held objects to switch to the waypoint', () => serverWaypoint(z.snapshot()) === WP);
    t.deepEqual(heldOf(restarted.cp), []);
    t.deepEqual(servedPath(restarted.cp), ['team-b/wp']);
  },
);

sqliteTest(
  'sqlite: a restart after the waypoint served keeps its users failing closed when it is gone, never routed around it',
  async (t) => {
    const { dir, first } = await heldOnDirectPath(t);
    const source = waypoint(t, first.cp, first.address);
    await until('the waypoint to ACK and its users to switch', () => servedPath(first.cp)?.length === 1);
    t.deepEqual(heldOf(first.cp), []);
    source.stop();
    await first.stop();

    // The waypoint is gone: it does not come back to the restarted control plane.
    const restarted = await startLocal(t, dir, ip('0.1'));
    t.deepEqual(heldOf(restarted.cp), [], 'nothing held: the waypoint was used');
    t.deepEqual(servedPath(restarted.cp), ['team-b/wp'], 'served through the waypoint');
    t.like(
      restarted.cp.waypointStatus().find((w) => w.waypoint === 'team-b/wp'),
      { ready: false, users: 2, held: 0 },
      'not ready, its users bound to it: their traffic fails closed',
    );
    const z = ztunnel(t, restarted.cp, restarted.address);
    await until('the ztunnel to be served the server', () => z.snapshot().workloads.has(SERVER));
    t.is(serverWaypoint(z.snapshot()), WP, 'the ztunnel sends it to the waypoint, which is not there');
    // A later change recompiles; still never around the waypoint.
    t.true(restarted.cp.store.applyYaml(yamlOf([podDoc('team-b', 'other', ip('2.9'), 'node-b')])).ok);
    t.deepEqual(servedPath(restarted.cp), ['team-b/wp']);
  },
);

sqliteTest(
  'sqlite: a stored binding that is not a reference is served as compiled, never as direct, counted, and replaced by a readable one',
  async (t) => {
    const { dir, first } = await heldOnDirectPath(t);
    await first.stop();
    // Something other than zmesh wrote the pod's binding (a hand edit, a restore gone wrong).
    const { DatabaseSync } = await import('node:sqlite');
    const db = new DatabaseSync(join(dir, STATE_DB_FILE));
    db.prepare('UPDATE bindings SET value = ? WHERE key = ?').run(
      '{"not":"a reference"}',
      `team-b/w/${SERVER}`,
    );
    db.close();

    const restarted = await startLocal(t, dir, ip('0.1'));
    const unreadable = async () => {
      const text = await restarted.cp.metrics.registry.metrics();
      return Number(/^zmesh_cp_waypoint_bindings_unreadable_total (\d+)$/m.exec(text)?.[1]);
    };
    t.deepEqual(heldOf(restarted.cp), [HELD[1]], 'the Service stays held; the pod is not held on a guess');
    t.deepEqual(
      servedPath(restarted.cp),
      ['team-b/wp'],
      'the pod is served as compiled (fails closed), not direct',
    );
    t.is(await unreadable(), 1, 'counted once');
    t.regex(
      restarted.cp.store.bindings().get(`team-b/w/${SERVER}`) ?? '',
      /"hbonePort":15008/,
      'serving it recorded a readable binding in its place',
    );
    // The next serve decides from the readable record: nothing more is counted.
    t.true(restarted.cp.store.applyYaml(yamlOf([podDoc('team-b', 'other', ip('2.9'), 'node-b')])).ok);
    t.is(await unreadable(), 1);
    t.deepEqual(servedPath(restarted.cp), ['team-b/wp']);
  },
);

const noEtcd = etcdUnavailable();
if (noEtcd) test.skip(`etcd waypoint-hold test skipped: ${noEtcd}`, () => {});

(noEtcd ? test.serial.skip : test.serial)(
  'etcd: two replicas hold and release alike, whichever one a waypoint ACKs on, and a replica started late agrees',
  async (t) => {
    t.timeout(60_000);
    let etcd: EtcdCluster | undefined;
    t.teardown(async () => {
      await etcd?.stop();
    });
    etcd = await startEtcdCluster(ip('9.1'), 1);
    const replica = async (host: string) => {
      const shared = await EtcdStateStore.open(etcd!.url);
      const cp = new ControlPlane({ ...TRUST, shared, tokenKey: await sharedNodeTokenKey(shared) });
      t.teardown(() => cp.stop());
      const port = await cp.start(0, host);
      return { cp, address: `${host}:${port}` };
    };
    const r0 = await replica(ip('0.1'));
    for (const applyYaml of [MESH, L7_ON]) t.true((await r0.cp.store.submit({ applyYaml })).ok);
    t.deepEqual(heldOf(r0.cp), HELD);

    // A replica that starts now never served these objects: it decides from the store's bindings.
    const r1 = await replica(ip('0.4'));
    t.is(r1.cp.store.view().generation, r0.cp.store.view().generation);
    t.deepEqual(heldOf(r1.cp), HELD, 'the late replica holds too, rather than failing closed');
    t.deepEqual(servedPath(r1.cp), []);

    // The waypoint connects to r1 only; r0, which no waypoint ever ACKed, switches with it.
    const source = waypoint(t, r1.cp, r1.address);
    await until('r1 to switch', () => servedPath(r1.cp)?.length === 1);
    await until('r0 to switch through the store', () => servedPath(r0.cp)?.length === 1);
    t.deepEqual(heldOf(r0.cp), []);
    t.like(
      r0.cp.waypointStatus().find((w) => w.waypoint === 'team-b/wp'),
      { ready: false, users: 2 },
    );
    t.is(
      r1.cp.store.view().generation,
      r0.cp.store.view().generation,
      'the release is one commit both serve',
    );

    // Gone again: both keep it, as does one more replica started now.
    source.stop();
    await until('r1 to see the waypoint gone', () =>
      r1.cp.waypointStatus().some((w) => w.waypoint === 'team-b/wp' && !w.ready),
    );
    t.true(
      (await r0.cp.store.submit({ applyYaml: yamlOf([podDoc('team-b', 'p2', ip('2.8'), 'node-b')]) })).ok,
    );
    await until('r1 to catch up', () => r1.cp.store.view().generation === r0.cp.store.view().generation);
    const r2 = await replica(ip('0.5'));
    for (const r of [r0, r1, r2]) {
      t.deepEqual(servedPath(r.cp), ['team-b/wp']);
      t.deepEqual(heldOf(r.cp), []);
    }

    // `ns l7 on` returns once the users switched, though the release is a commit of its own.
    t.true((await r1.cp.setNamespaceL7('team-b', undefined, 2000)).ok);
    await until('all to be direct again', () => [r0, r1, r2].every((r) => servedPath(r.cp)?.length === 0));
    const on = r1.cp.setNamespaceL7('team-b', 'wp', 10_000);
    await until('r1 to hold them (p2 too)', () => heldOf(r1.cp).length === 3);
    waypoint(t, r1.cp, r1.address);
    const done = await on;
    t.true(done.ok, JSON.stringify(done));
    t.deepEqual(heldOf(r1.cp), [], 'switched when ns l7 on returns');
    t.deepEqual(servedPath(r1.cp), ['team-b/wp']);
  },
);
