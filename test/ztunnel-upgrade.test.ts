import { LocalMesh, STEADY_SERVER, UPGRADE_CLIENT, type UpgradeTrafficResult } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import type { ResultPromise } from 'execa';

/**
 * The upgrade drill, short form (docs/upgrade.md): while a client opens a connection every
 * 50 ms and holds long-lived connections pinging every 100 ms, a successor ztunnel starts on
 * the destination node, then on the source node (the node agent hands it the pods), and
 * each old one gets SIGTERM.
 * Nothing is refused or broken, and the old process exits once its last connection closes.
 * Needs root and BPF (the netns cluster with real capture).
 */
const unavailable = await BpfCapture.unavailableReason();
const drill = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`ztunnel upgrade drill skipped: ${unavailable}`, () => {});

const PORT = 8080;
const LONG_LIVED = 5;
const DURATION_MS = 12_000;

let mesh: LocalMesh | undefined;
const children: ResultPromise[] = [];

test.after.always(async () => {
  for (const c of children) c.kill('SIGKILL');
  await mesh?.down();
});

drill(
  'ztunnel upgrades on the destination and the source node refuse no new connection and break no long-lived one',
  async (t) => {
    t.timeout(40_000);
    mesh = await LocalMesh.up({
      nodes: ['node-a', 'node-b'],
      pods: [
        { name: 'client', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
        { name: 'server', namespace: 'team-b', serviceAccount: 'server', node: 'node-b' },
      ],
      services: [],
    });
    const server = mesh.pod('server');
    const srv = mesh.cluster.runInPod(server, ['node', '-e', STEADY_SERVER, String(PORT)], {
      reject: false,
      stdout: 'pipe',
    });
    children.push(srv);
    await new Promise<void>((resolve) => srv.stdout?.once('data', () => resolve()));
    await mesh.waitReady();

    const client = mesh.cluster.runInPod(
      mesh.pod('client'),
      ['node', '-e', UPGRADE_CLIENT, server.ipv4, String(PORT), String(DURATION_MS), String(LONG_LIVED)],
      { reject: false, stdout: 'pipe' },
    );
    children.push(client);
    await new Promise((r) => setTimeout(r, 1500));

    // Destination node first, then the source node, each while the traffic runs.
    const olds: Array<{ node: string; old: ResultPromise; exitedAt: number }> = [];
    for (const node of ['node-b', 'node-a']) {
      const { old } = await mesh.startSuccessor(node);
      await mesh.waitReady();
      const entry = { node, old, exitedAt: 0 };
      void old.finally(() => {
        entry.exitedAt = Date.now();
      });
      olds.push(entry);
      process.kill(old.pid!, 'SIGTERM');
      // The drain keeps the long-lived connections: the old process outlives the overlap.
      await new Promise((r) => setTimeout(r, 1500));
      t.is(entry.exitedAt, 0, `the old ztunnel on ${node} still serves its long-lived connections`);
      const draining = await mesh.admin(node, 15020, '/metrics').catch(() => undefined);
      t.log(
        `old ztunnel on ${node} while draining:`,
        draining?.body.match(/^zmesh_drain_connections.*$/gm)?.join(', '),
      );
    }

    const r = await client;
    const result = JSON.parse(String(r.stdout).trim().split('\n').pop() ?? '{}') as UpgradeTrafficResult;
    t.log(JSON.stringify(result));
    t.true(result.newOk > 100, `new connections went through (${result.newOk})`);
    t.is(result.newFailed, 0, `no new connection refused: ${JSON.stringify(result.newErrors)}`);
    t.is(result.liveBroken, 0, `no long-lived connection broken: ${JSON.stringify(result.liveErrors)}`);
    t.true(result.pongs >= result.pings - LONG_LIVED, 'every ping answered');

    for (const o of olds) {
      await Promise.race([o.old, new Promise((r) => setTimeout(r, 5000))]);
      t.not(o.exitedAt, 0, `the old ztunnel on ${o.node} exited after its last connection closed`);
      t.true(o.exitedAt >= result.endedAt, 'and not before');
      t.log(
        `old ztunnel on ${o.node} exited ${o.exitedAt - result.endedAt} ms after the long-lived connections ended`,
      );
      t.is((await o.old).exitCode, 0);
    }

    // The successors hold the pods on their own.
    for (const node of ['node-a', 'node-b']) t.regex(await mesh.metrics(node), /zmesh_pods_enrolled 1/);
  },
);
