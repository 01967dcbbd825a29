import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { baseDocs, clientForwards, forwardConfigs, podDoc, startXdsNode, type XdsNode } from '@zmesh/harness';
import { adminRequest } from '@zmesh/shared';
import test from 'ava';
import {
  type EtcdCluster,
  etcdUnavailable,
  type Replica,
  startEtcdCluster,
  startReplica,
} from './helpers/etcd.js';
import { echoes, startEcho, workloadUids } from './helpers/probes.js';

/** 127.134.0.0/16 is this file's: replicas .0.1 and .0.4, proxies .0.2 and .0.3, etcd .9.1. */
const BLOCK = 134;
const ip = (s: string) => `127.${BLOCK}.${s}`;
const CLIENT_EVERY_MS = 100;
const APPLY_EVERY_MS = 1000;
/**
 * Phases of the drill (ms from the start of the load): kill the etcd leader, then a replica,
 * then stop. 12 s in CI; `ZMESH_HA_SECONDS=300 pnpm exec ava test/control-plane-ha.test.ts`
 * is the long form (the kills at the same fractions of it).
 */
const LOAD_FOR = Number(process.env.ZMESH_HA_SECONDS ?? 12) * 1000;
const KILL_ETCD_AT = LOAD_FOR / 4;
const KILL_REPLICA_AT = (LOAD_FOR * 7) / 12;

interface StatusRow {
  proxy: string;
  node: string;
  connected: boolean;
  types: Record<string, { state: string; current: number }>;
}

const statusOf = async (r: Replica) => (await adminRequest(r.admin, '/proxy-status')).json<StatusRow[]>();

async function poll(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await Promise.resolve(cond()).catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Documents as multi-document YAML (JSON is YAML). */
const yamlOf = (docs: unknown[]) => docs.map((d) => JSON.stringify(d)).join('\n---\n');

const generationOf = async (r: Replica) =>
  (await adminRequest(r.admin, '/objects')).json<{ generation: number }>().generation;

const unavailable = etcdUnavailable();
if (unavailable) test.skip(`control-plane HA test skipped: ${unavailable}`, () => {});

(unavailable ? test.serial.skip : test.serial)(
  'HA on etcd: an etcd member and then a replica are killed under load; no connection fails, every acknowledged apply reaches every proxy',
  async (t) => {
    t.timeout(78_000 + LOAD_FOR);
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-cp-ha-'));
    let etcd: EtcdCluster | undefined;
    const replicas: Replica[] = [];
    const nodes: XdsNode[] = [];
    let echo: Awaited<ReturnType<typeof startEcho>> | undefined;
    t.teardown(async () => {
      for (const n of nodes) await n.stop();
      for (const s of echo?.sockets ?? []) s.destroy();
      echo?.close();
      for (const r of replicas) r.child.kill('SIGKILL');
      await Promise.allSettled(replicas.map((r) => r.child));
      await etcd?.stop();
      await rm(dir, { recursive: true, force: true });
    });

    etcd = await startEtcdCluster(ip('9.1'), 3);
    // One after the other: the first creates the CA root and node-token key, the second finds them.
    replicas.push(await startReplica('r0', ip('0.1'), etcd.url, dir));
    replicas.push(await startReplica('r1', ip('0.4'), etcd.url, dir));
    const [r0, r1] = replicas as [Replica, Replica];
    const rootsPem = await readFile(r0.roots, 'utf8');
    t.is(await readFile(r1.roots, 'utf8'), rootsPem, 'both replicas sign under the one root in etcd');

    const base = await adminRequest(r0.admin, '/apply', {
      method: 'POST',
      body: yamlOf(baseDocs(BLOCK)),
    });
    t.true(base.ok, base.text);
    const generation = base.json<{ generation: number }>().generation;
    await poll('r1 to reach the same generation', async () => (await generationOf(r1)) === generation);

    // A token minted by one replica is accepted by the other (the key is in etcd).
    const token = async (node: string) =>
      (await adminRequest(r0.admin, `/node-token?node=${node}`, { method: 'POST' })).json<{ token: string }>()
        .token;
    echo = await startEcho(ip('2.1'), 7000);
    // node-a prefers r0 and node-b r1: an apply on either must reach a proxy on the other.
    const common = { rootsPem: [rootsPem], certTtlSeconds: 3600 };
    nodes.push(
      await startXdsNode({
        ...common,
        node: 'node-a',
        address: ip('0.2'),
        xds: `${r0.xds},${r1.xds}`,
        token: await token('node-a'),
        forwards: forwardConfigs(
          clientForwards({ name: 'client', namespace: 'team-a', address: ip('1.1') }, [
            { listen: `${ip('1.1')}:18000`, destination: `${ip('2.1')}:7000` },
          ]),
        ),
      }),
      await startXdsNode({
        ...common,
        node: 'node-b',
        address: ip('0.3'),
        xds: `${r1.xds},${r0.xds}`,
        token: await token('node-b'),
      }),
    );
    await poll('both proxies to sync and be ready', () =>
      nodes.every((n) => n.source.synced && n.z.readiness().ready),
    );
    t.true(await echoes(ip('1.1'), 18000), 'traffic flows before the drill');
    // xDS versions come from etcd's revision: node-a (on r0) and node-b (on r1) see the same ones.
    const versionsOn = async (r: Replica, node: string) => {
      const row = (await statusOf(r)).find((x) => x.node === node && x.connected);
      return Object.fromEntries(Object.entries(row?.types ?? {}).map(([k, v]) => [k, v.current]));
    };
    const onR0 = await versionsOn(r0, 'node-a');
    t.true(Object.keys(onR0).length > 0, 'node-a is connected to r0');
    t.deepEqual(await versionsOn(r1, 'node-b'), onR0, 'both replicas serve the same xDS versions');

    // The load: a connection every 100 ms, an apply (one more pod) every second.
    const started = Date.now();
    const probes: Promise<boolean>[] = [];
    const clientTimer = setInterval(() => probes.push(echoes(ip('1.1'), 18000, 3000)), CLIENT_EVERY_MS);
    const acked = new Map<string, { at: number; reached?: number }>();
    const refused: string[] = [];
    let applies = 0;
    const applyOnce = async () => {
      const i = applies++;
      const live = replicas.filter((r) => r.alive);
      const target = live[i % live.length]!;
      const name = `p-${i}`;
      const res = await adminRequest(target.admin, `/apply?source=ha-${i}`, {
        method: 'POST',
        body: yamlOf([podDoc('team-b', name, ip(`${5 + ((i + 1) >> 8)}.${(i + 1) & 255}`), 'node-b')]),
      }).catch((e: Error) => ({ ok: false, status: 0, text: e.message }));
      if (res.ok) acked.set(`Kubernetes//Pod/team-b/${name}`, { at: Date.now() });
      // Only an apply sent to the replica being killed may go unacknowledged.
      else if (target.alive) refused.push(`${name} on ${target.name}: ${res.status} ${res.text}`);
    };
    const applying: Promise<void>[] = [];
    const applyTimer = setInterval(() => applying.push(applyOnce()), APPLY_EVERY_MS);
    const reachTimer = setInterval(() => {
      const held = nodes.map((n) => new Set(workloadUids(n.z)));
      for (const [uid, a] of acked)
        if (a.reached === undefined && held.every((h) => h.has(uid))) a.reached = Date.now();
    }, 20);
    const at = (ms: number) => new Promise((r) => setTimeout(r, started + ms - Date.now()));
    try {
      await at(KILL_ETCD_AT);
      const leader = await etcd.leader();
      await etcd.kill(leader);
      t.log(`killed etcd leader ${leader.name} at ${Date.now() - started} ms`);
      await at(KILL_REPLICA_AT);
      r0.alive = false;
      r0.child.kill('SIGKILL');
      await r0.child;
      t.log(`killed replica r0 at ${Date.now() - started} ms`);
      await at(LOAD_FOR);
    } finally {
      clearInterval(clientTimer);
      clearInterval(applyTimer);
    }
    await Promise.all(applying);
    const outcomes = await Promise.all(probes);
    const failed = outcomes.filter((ok) => !ok).length;
    await poll(
      'every acknowledged apply to reach both proxies',
      () => [...acked.values()].every((a) => a.reached !== undefined),
      10_000,
    ).catch(() => undefined);
    clearInterval(reachTimer);

    const lags = [...acked.values()].map((a) => (a.reached === undefined ? Infinity : a.reached - a.at));
    lags.sort((x, y) => x - y);
    t.log(
      `${outcomes.length} connections (${failed} failed); ${applies} applies, ${acked.size} acknowledged, ` +
        `reached both proxies in p50 ${lags[lags.length >> 1]} ms, max ${lags.at(-1)} ms`,
    );
    t.is(failed, 0, 'no client connection failed');
    t.deepEqual(refused, [], 'applies to live replicas are acknowledged');
    t.true(acked.size >= applies - 1, 'at most the apply in flight at the kill goes unacknowledged');
    t.true(
      lags.every((l) => l !== Infinity),
      'every acknowledged apply reached every proxy',
    );
    // Through etcd's watch within a second (the median: one may wait out a proxy's failover).
    t.true(
      (lags[lags.length >> 1] ?? Infinity) < 1000,
      'applies reach proxies on the other replica within a second',
    );

    // proxy-status converges on the surviving replica: both proxies, every type SYNCED.
    await poll('proxy-status on r1 to converge', async () => {
      const rows = await statusOf(r1);
      const connected = rows.filter((r) => r.connected);
      return (
        connected.length === 2 &&
        connected.every((r) => Object.values(r.types).every((s) => s.state === 'SYNCED'))
      );
    });
    t.pass('proxy-status converged');

    // Quorum lost (a second member killed): an apply is refused with the reason, never
    // acknowledged; the replica keeps serving what it has and traffic flows.
    await etcd.kill(
      (await etcd.leader().catch(() => undefined)) ?? etcd.members.find((m) => m.child.exitCode === null)!,
    );
    const lostAt = Date.now();
    const noQuorum = await adminRequest(r1.admin, '/apply?source=no-quorum', {
      method: 'POST',
      body: yamlOf([podDoc('team-b', 'no-quorum', ip('6.1'), 'node-b')]),
    });
    t.log(
      `without quorum: apply answered ${noQuorum.status} after ${Date.now() - lostAt} ms: ${noQuorum.text}`,
    );
    t.false(noQuorum.ok, 'nothing is acknowledged that etcd did not commit');
    t.is(noQuorum.status, 503, 'the store, not the change, is at fault');
    t.regex(noQuorum.text, /ZM_ERR_STATE_STORE/);
    const ready = await adminRequest(r1.admin, '/healthz/ready');
    t.is(ready.status, 503, 'readiness says the store is not answering');
    t.regex(ready.text, /state store etcd:\/\/\S+ unreachable: /);
    t.true(await echoes(ip('1.1'), 18000), 'proxies keep their config: traffic flows');
  },
);
