import { connect, type Socket } from 'node:net';
import { resolve } from 'node:path';
import test from 'ava';
import { execa } from 'execa';
import { startEcho, startMesh, waitFor, type XdsMesh } from './helpers/mesh.js';

/**
 * The operator's view of a running mesh through the CLI: `ztunnel-config` read from every
 * node's ztunnel the control plane knows (`--node`), live connections. 127.93.0.0/16 is
 * this file's.
 */
const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const BLOCK = 93;
const CLIENT_PORT = 18_000;

let mesh: XdsMesh;
let closeAll: () => Promise<void>;

test.before(async () => {
  mesh = await startMesh(BLOCK, {
    forwards: [{ port: CLIENT_PORT, to: `127.${BLOCK}.2.1:7000` }],
    controlPlane: {},
  });
  const echo = await startEcho(mesh.ip.server, 7000);
  closeAll = async () => {
    for (const s of echo.sockets) s.destroy();
    await new Promise((r) => echo.close(r));
    await mesh.stop();
  };
});
test.after.always(() => closeAll?.());

const zmesh = (...argv: string[]) =>
  execa(ZMESH, [...argv, '--admin', mesh.admin.admin], {
    reject: false,
    timeout: 20_000,
    env: { ZMESH_DEBUG: '' },
  });

/** Cells of a table, split on the column gaps (widths follow addresses and times). */
const cells = (s: string) => s.split('\n').map((l) => l.trim().split(/\s{2,}/));

test("ztunnel-config --node reads each node's ztunnel found through the control plane; an unknown node is refused naming the known ones", async (t) => {
  const [one, all, unknown, json] = await Promise.all([
    zmesh('ztunnel-config', 'certificates', '--node', 'node-b'),
    zmesh('ztunnel-config', 'policies'),
    zmesh('ztunnel-config', 'workloads', '--node', 'node-x'),
    zmesh('ztunnel-config', 'certificates', '--node', 'node-a', '-o', 'json'),
  ]);
  t.is(one.exitCode, 0, one.stderr);
  t.deepEqual(
    cells(one.stdout.replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, '<time>')),
    cells(`ZTUNNEL   IDENTITY                                   STATE   NOT-AFTER   ROOTS
node-b    spiffe://cluster.local/ns/team-b/sa/server   Valid   <time>      1`),
  );
  t.is(all.exitCode, 0, all.stderr);
  t.is(
    all.stdout,
    [
      'ZTUNNEL   NAMESPACE      NAME                            ACTION   SCOPE',
      'node-a    istio-system   istio_converted_static_strict   DENY     WORKLOAD_SELECTOR',
      'node-b    istio-system   istio_converted_static_strict   DENY     WORKLOAD_SELECTOR',
    ].join('\n'),
  );
  t.is(unknown.exitCode, 1);
  t.is(
    unknown.stderr,
    'zmesh ztunnel-config: ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE: ztunnel admin endpoint of node node-x unreachable: the control plane knows no connected ztunnel there with an admin address (nodes it knows: node-a, node-b)',
  );
  const parsed = JSON.parse(json.stdout) as Array<{
    node: string;
    admin: string;
    items: Array<{ identity: string }>;
  }>;
  t.deepEqual(
    parsed.map((p) => [p.node, p.admin, p.items.map((i) => i.identity)]),
    [['node-a', `127.${BLOCK}.0.2:15000`, ['spiffe://cluster.local/ns/team-a/sa/client']]],
  );
});

test('ztunnel-config connections: a live tunnel shows at both ends, and is gone once closed', async (t) => {
  const socket: Socket = connect({ host: mesh.ip.client, port: CLIENT_PORT, localAddress: mesh.ip.client });
  await new Promise<void>((r, j) => {
    socket.once('error', j);
    socket.write('ping');
    socket.once('data', () => r());
  });
  await waitFor(() => mesh.a.connections.size === 1 && mesh.b.connections.size === 1, 5000);
  const open = await zmesh('ztunnel-config', 'connections');
  t.is(open.exitCode, 0, open.stderr);
  const rows = cells(open.stdout);
  t.deepEqual(rows[0], ['ZTUNNEL', 'WORKLOAD', 'DIRECTION', 'LOCAL', 'REMOTE', 'PEER', 'PROTOCOL', 'AGE']);
  const shape = rows
    .slice(1)
    .map((r) => [r[0], r[1], r[2], r[3]?.replace(/:\d+$/, ':*'), r[4]?.replace(/:\d+$/, ':*'), r[5], r[6]]);
  t.deepEqual(shape, [
    [
      'node-a',
      'team-a/client',
      'outbound',
      `127.${BLOCK}.1.1:*`,
      `127.${BLOCK}.2.1:*`,
      'spiffe://cluster.local/ns/team-b/sa/server',
      'HBONE',
    ],
    [
      'node-b',
      'team-b/server',
      'inbound',
      `127.${BLOCK}.2.1:*`,
      `127.${BLOCK}.1.1:*`,
      'spiffe://cluster.local/ns/team-a/sa/client',
      'HBONE',
    ],
  ]);
  t.regex(rows[1]?.[7] ?? '', /^\d+s$/);
  socket.destroy();
  await waitFor(() => mesh.a.connections.size === 0 && mesh.b.connections.size === 0, 5000);
  const closed = await zmesh('ztunnel-config', 'connections', '--node', 'node-a');
  t.is(closed.stdout, 'ZTUNNEL   WORKLOAD   DIRECTION   LOCAL   REMOTE   PEER   PROTOCOL   AGE');
});
