import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { baseDocs, clientForwards, forwardConfigs, podDoc, startXdsNode, type XdsNode } from '@zmesh/harness';
import { adminRequest } from '@zmesh/shared';
import test from 'ava';
import { execa } from 'execa';
import {
  type EtcdCluster,
  etcdUnavailable,
  type Replica,
  startEtcdCluster,
  startReplica,
} from './helpers/etcd.js';
import { echoes, startEcho, workloadUids } from './helpers/probes.js';

/**
 * etcd unreachable (every member killed) under a running replica: the operator's changes fail
 * at once with ZM_ERR_STATE_STORE (one line, exit 1; the admin API 503), readiness says the
 * store is unreachable, and the proxies keep serving what they hold. 127.135.0.0/16 is this
 * file's: replica .0.1, proxies .0.2 and .0.3, etcd .9.1.
 */
const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const BLOCK = 135;
const ip = (s: string) => `127.${BLOCK}.${s}`;
/** What the operator may wait for a refusal: the etcd client's call deadline (3 s), twice, and slack. */
const REFUSED_WITHIN_MS = 10_000;

const yamlOf = (docs: unknown[]) => docs.map((d) => JSON.stringify(d)).join('\n---\n');
const WAYPOINT = {
  kind: 'Gateway',
  metadata: { name: 'waypoint', namespace: 'team-b' },
  spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: ip('3.1') }] },
};

async function poll(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await Promise.resolve(cond()).catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const unavailable = etcdUnavailable();
if (unavailable) test.skip(`etcd outage test skipped: ${unavailable}`, () => {});

(unavailable ? test.serial.skip : test.serial)(
  'etcd unreachable: apply and ns l7 on fail in one line with ZM_ERR_STATE_STORE (admin 503), readiness says so, proxies serve last-known-good',
  async (t) => {
    t.timeout(90_000);
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-etcd-outage-'));
    let etcd: EtcdCluster | undefined;
    let replica: Replica | undefined;
    const nodes: XdsNode[] = [];
    let echo: Awaited<ReturnType<typeof startEcho>> | undefined;
    t.teardown(async () => {
      for (const n of nodes) await n.stop();
      for (const s of echo?.sockets ?? []) s.destroy();
      echo?.close();
      replica?.child.kill('SIGKILL');
      await replica?.child;
      await etcd?.stop();
      await rm(dir, { recursive: true, force: true });
    });

    etcd = await startEtcdCluster(ip('9.1'), 3);
    replica = await startReplica('r0', ip('0.1'), etcd.url, dir);
    const admin = replica.admin;
    const base = await adminRequest(admin, '/apply', {
      method: 'POST',
      body: yamlOf([...baseDocs(BLOCK), WAYPOINT]),
    });
    t.true(base.ok, base.text);
    const token = async (node: string) =>
      (await adminRequest(admin, `/node-token?node=${node}`, { method: 'POST' })).json<{ token: string }>()
        .token;
    const rootsPem = await readFile(replica.roots, 'utf8');
    echo = await startEcho(ip('2.1'), 7000);
    const common = { rootsPem: [rootsPem], certTtlSeconds: 3600, xds: replica.xds };
    nodes.push(
      await startXdsNode({
        ...common,
        node: 'node-a',
        address: ip('0.2'),
        token: await token('node-a'),
        forwards: forwardConfigs(
          clientForwards({ name: 'client', namespace: 'team-a', address: ip('1.1') }, [
            { listen: `${ip('1.1')}:18000`, destination: `${ip('2.1')}:7000` },
          ]),
        ),
      }),
      await startXdsNode({ ...common, node: 'node-b', address: ip('0.3'), token: await token('node-b') }),
    );
    await poll('both proxies to sync and be ready', () =>
      nodes.every((n) => n.source.synced && n.z.readiness().ready),
    );
    t.true(await echoes(ip('1.1'), 18000), 'traffic flows before the outage');
    const held = nodes.map((n) => workloadUids(n.z).sort());
    t.is((await adminRequest(admin, '/healthz/ready')).status, 200);

    for (const m of etcd.members) await etcd.kill(m);
    const killedAt = Date.now();

    // Readiness: 503, naming the store, once the watch has noticed.
    await poll('readiness to report the store', async () => {
      const r = await adminRequest(admin, '/healthz/ready');
      return r.status === 503 && /state store etcd:\/\/\S+ unreachable: /.test(r.text);
    });
    const ready = await adminRequest(admin, '/healthz/ready');
    t.log(`readiness after ${Date.now() - killedAt} ms: ${ready.status} ${ready.text.trim()}`);
    t.regex(ready.text, /state store etcd:\/\/127\.135\.9\.1:\d+\S* unreachable: /);

    const file = join(dir, 'more.yaml');
    await writeFile(file, yamlOf([podDoc('team-b', 'during', ip('5.1'), 'node-b')]));
    const cli = async (args: string[]) => {
      const started = Date.now();
      const r = await execa(ZMESH, [...args, '--admin', `${dir}/r0.sock`], {
        reject: false,
        timeout: 30_000,
      });
      return { ...r, ms: Date.now() - started };
    };
    for (const args of [
      ['apply', '-f', file],
      ['ns', 'l7', 'on', 'team-b', '--timeout', '5'],
    ]) {
      const r = await cli(args);
      const what = args.slice(0, 2).join(' ');
      t.log(`${what}: exit ${r.exitCode} after ${r.ms} ms: ${r.stderr}`);
      t.is(r.exitCode, 1, what);
      t.is(r.stdout, '', `${what}: nothing claims success`);
      const lines = r.stderr.split('\n');
      t.is(lines.length, 1, `${what}: one line`);
      t.regex(lines[0]!, /^zmesh (apply|ns l7): ZM_ERR_STATE_STORE: .*etcd:\/\/127\.135\.9\.1:\d+/);
      t.true(r.ms < REFUSED_WITHIN_MS, `${what}: refused within ${REFUSED_WITHIN_MS} ms (took ${r.ms})`);
    }

    // The admin API's answers: 503, the store's code, for both.
    const apply = await adminRequest(admin, '/apply', { method: 'POST', body: await readFile(file, 'utf8') });
    t.is(apply.status, 503, apply.text);
    t.regex(apply.text, /ZM_ERR_STATE_STORE/);
    const l7 = await adminRequest(admin, '/namespace-l7?namespace=team-b&state=on&timeoutMs=1000', {
      method: 'POST',
    });
    t.is(l7.status, 503, l7.text);
    t.regex(l7.text, /ZM_ERR_STATE_STORE/);

    // Nothing changed: the replica serves what it had; the proxies hold it and traffic flows.
    const objects = (await adminRequest(admin, '/objects')).json<{ objects: string[] }>().objects;
    t.false(objects.includes('Pod/team-b/during'), 'the refused apply is not served');
    const ns = (await adminRequest(admin, '/objects?full=1&kind=Namespace&name=team-b')).json<{
      objects: Array<{ metadata: { labels: Record<string, string> } }>;
    }>().objects[0];
    t.is(ns?.metadata.labels['istio.io/use-waypoint'], undefined, 'L7 stayed off');
    t.deepEqual(
      nodes.map((n) => workloadUids(n.z).sort()),
      held,
      'proxies keep their last-known-good config',
    );
    t.true(await echoes(ip('1.1'), 18000), 'traffic flows through the outage');
    t.true(
      nodes.every((n) => n.z.readiness().ready),
      'proxies stay ready',
    );
    const metrics = (await adminRequest(admin, '/metrics')).text;
    t.regex(metrics, /^zmesh_cp_ready 0$/m);
    t.regex(
      metrics,
      /^zmesh_cp_store_operation_seconds_count\{backend="etcd",op="commit",outcome="error"\} [1-9]/m,
    );
  },
);
