import { LocalMesh, STEADY_SERVER, UPGRADE_CLIENT, type UpgradeTrafficResult } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import type { ResultPromise } from 'execa';

/**
 * The upgrade drill, short form (docs/upgrade.md): while a client opens a connection every
 * 50 ms and holds long-lived connections pinging every 100 ms, a successor ztunnel starts on
 * the destination node (the node agent hands it the pods), and the old one gets SIGTERM.
 * Nothing is refused or broken, and the old process exits once its last connection closes.
 * Needs root and BPF (the netns cluster with real capture).
 */
const unavailable = await BpfCapture.unavailableReason();
const drill = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`ztunnel upgrade drill skipped: ${unavailable}`, () => {});

const PORT = 8080;
const LONG_LIVED = 5;
const DURATION_MS = 9000;

let mesh: LocalMesh | undefined;
const children: ResultPromise[] = [];

test.after.always(async () => {
  for (const c of children) c.kill('SIGKILL');
  await mesh?.down();
});

drill(
  'a ztunnel upgrade on the destination node refuses no new connection and breaks no long-lived one',
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

    const { old } = await mesh.startSuccessor('node-b');
    await mesh.waitReady();
    const oldPid = old.pid!;
    let oldExitedAt = 0;
    void old.finally(() => {
      oldExitedAt = Date.now();
    });
    process.kill(oldPid, 'SIGTERM');

    // The drain keeps the long-lived connections: the old process outlives the overlap.
    await new Promise((r) => setTimeout(r, 2000));
    t.is(oldExitedAt, 0, 'the old ztunnel still serves its long-lived connections');
    const drainMetrics = await mesh.admin('node-b', 15020, '/metrics').catch(() => undefined);
    t.log(
      'old ztunnel while draining:',
      drainMetrics?.body.match(/^zmesh_drain_connections.*$/gm)?.join(', '),
    );

    const r = await client;
    const result = JSON.parse(String(r.stdout).trim().split('\n').pop() ?? '{}') as UpgradeTrafficResult;
    t.log(JSON.stringify(result));
    t.true(result.newOk > 100, `new connections went through (${result.newOk})`);
    t.is(result.newFailed, 0, `no new connection refused: ${JSON.stringify(result.newErrors)}`);
    t.is(result.liveBroken, 0, `no long-lived connection broken: ${JSON.stringify(result.liveErrors)}`);
    t.true(result.pongs >= result.pings - LONG_LIVED, 'every ping answered');

    await Promise.race([old, new Promise((r) => setTimeout(r, 5000))]);
    t.not(oldExitedAt, 0, 'the old ztunnel exited after its last connection closed');
    t.true(oldExitedAt >= result.endedAt, 'and not before');
    t.log(`old ztunnel exited ${oldExitedAt - result.endedAt} ms after the long-lived connections ended`);
    t.is((await old).exitCode, 0);

    // The successor serves on its own: a fresh connection after the old one is gone.
    const after = await mesh.metrics('node-b');
    t.regex(after, /zmesh_pods_enrolled 1/);
  },
);
