import { connect, type Socket } from 'node:net';
import { resolve } from 'node:path';
import { collectMesh, podDescriptionText, startMesh, waitFor, type XdsMesh } from '@zmesh/harness';
import test from 'ava';
import { execa } from 'execa';
import { startEcho } from './helpers/probes.js';

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
  mesh = await startMesh({
    run: 'in-process',
    block: BLOCK,
    forwards: [{ port: CLIENT_PORT, to: `127.${BLOCK}.2.1:7000` }],
    controlPlane: {
      extraDocs: [
        {
          kind: 'AuthorizationPolicy',
          metadata: { name: 'allow-client', namespace: 'team-b' },
          spec: {
            selector: { matchLabels: { app: 'server' } },
            action: 'ALLOW',
            rules: [{ from: [{ source: { principals: ['cluster.local/ns/team-a/sa/client'] } }] }],
          },
        },
        {
          kind: 'AuthorizationPolicy',
          metadata: { name: 'no-debug-port', namespace: 'team-b' },
          spec: { action: 'DENY', rules: [{ to: [{ operation: { ports: ['9999'] } }] }] },
        },
      ],
    },
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
    // Generous: 8 helpers' tests share 2 cores, and this process also runs the mesh.
    timeout: 90_000,
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
      'node-a    team-b         allow-client                    ALLOW    WORKLOAD_SELECTOR',
      'node-a    team-b         no-debug-port                   DENY     NAMESPACE',
      'node-b    istio-system   istio_converted_static_strict   DENY     WORKLOAD_SELECTOR',
      'node-b    team-b         allow-client                    ALLOW    WORKLOAD_SELECTOR',
      'node-b    team-b         no-debug-port                   DENY     NAMESPACE',
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

test('x describe pod: its ztunnel, identity, certificate, waypoint and the policies that apply with why', async (t) => {
  const [server, json, missing, bad] = await Promise.all([
    zmesh('x', 'describe', 'pod', 'team-b/server'),
    zmesh('x', 'describe', 'pod', 'team-a/client', '-o', 'json'),
    zmesh('x', 'describe', 'pod', 'team-b/nope'),
    zmesh('x', 'describe', 'pod', 'Team_B/x'),
  ]);
  t.is(server.exitCode, 0, server.stderr);
  t.is(
    server.stdout
      .replace(/ztunnel~\S+/, 'ztunnel~<id>')
      .replace(/not after \S+ \(in \d+m\)/, 'not after <time> (in <age>)'),
    [
      'Pod:          team-b/server',
      'Node:         node-b',
      `Ztunnel:      ztunnel~<id> (admin 127.${BLOCK}.0.3:15000), connected`,
      'Identity:     spiffe://cluster.local/ns/team-b/sa/server',
      'Certificate:  Valid, not after <time> (in <age>)',
      'Waypoint:     none',
      "mTLS:         STRICT: no PeerAuthentication sets a mode: zmesh's default (STRICT)",
      'L4 policies (the ztunnel):',
      '  NAMESPACE      NAME                            ACTION   WHY',
      '  team-b         no-debug-port                   DENY     no selector: every workload in namespace team-b',
      "  team-b         allow-client                    ALLOW    its selector matches the pod's labels (app=server)",
      '  istio-system   istio_converted_static_strict   DENY     PeerAuthentication, folded in as Istio does',
      'L7 policies:  none (no waypoint)',
    ].join('\n'),
  );
  const client = JSON.parse(json.stdout) as {
    identity: string;
    node: string;
    mtls: { mode: string };
    l7Policies: unknown[];
  };
  t.is(client.identity, 'spiffe://cluster.local/ns/team-a/sa/client');
  t.is(client.node, 'node-a');
  t.is(client.mtls.mode, 'STRICT');
  t.deepEqual(client.l7Policies, []);
  t.is(missing.exitCode, 1);
  t.is(missing.stderr, 'zmesh x describe: no Pod nope in namespace team-b');
  t.is(bad.exitCode, 2);
  t.regex(bad.stderr, /^zmesh x describe pod: want NAMESPACE\/NAME/);
});

test('golden: x describe pod text with a waypoint not ready, an expired certificate, a pending policy, a PeerAuthentication and L7 policies', (t) => {
  const now = Date.parse('2026-12-04T12:00:00Z');
  t.is(
    podDescriptionText(
      {
        pod: 'shop/web',
        node: 'node-a',
        ztunnel: { proxy: 'ztunnel~10.0.0.2~x', admin: '10.0.0.2:15000', connected: false },
        identity: 'spiffe://cluster.local/ns/shop/sa/web',
        certificate: { state: 'Expired', notAfter: '2026-12-04T11:00:00.000Z' },
        waypoint: { name: 'shop/waypoint', ready: false, ackedBy: [] },
        mtls: {
          mode: 'PERMISSIVE',
          why: 'PeerAuthentication shop/web-mtls selects the pod (app=web)',
          ports: { '9000': 'STRICT' },
        },
        policies: [
          {
            namespace: 'shop',
            name: 'gone',
            action: '-',
            why: 'named for the workload but not received by this ztunnel: its traffic fails closed',
          },
        ],
        l7Policies: [
          {
            waypoint: 'shop/waypoint',
            kind: 'AuthorizationPolicy',
            namespace: 'shop',
            name: 'no-admin',
            action: 'DENY',
            why: 'targetRef Gateway shop/waypoint: every request this waypoint carries',
          },
          {
            waypoint: 'shop/waypoint',
            kind: 'RequestAuthentication',
            namespace: 'shop',
            name: 'jwt',
            action: 'JWT',
            why: 'targetRef Service shop/web, which the pod backs: requests addressed to it',
          },
        ],
      },
      now,
    ),
    [
      'Pod:          shop/web',
      'Node:         node-a',
      'Ztunnel:      ztunnel~10.0.0.2~x (admin 10.0.0.2:15000), DISCONNECTED',
      'Identity:     spiffe://cluster.local/ns/shop/sa/web',
      'Certificate:  Expired, not after 2026-12-04T11:00:00.000Z (expired)',
      'Waypoint:     shop/waypoint, NOT READY: no connected waypoint has ACKed its config; traffic to the pod fails closed',
      'mTLS:         PERMISSIVE: PeerAuthentication shop/web-mtls selects the pod (app=web); port 9000 STRICT',
      'L4 policies (the ztunnel):',
      '  NAMESPACE   NAME   ACTION   WHY',
      '  shop        gone   -        named for the workload but not received by this ztunnel: its traffic fails closed',
      'L7 policies (the waypoint):',
      '  WAYPOINT        KIND                    NAMESPACE   NAME       ACTION   WHY',
      '  shop/waypoint   AuthorizationPolicy     shop        no-admin   DENY     targetRef Gateway shop/waypoint: every request this waypoint carries',
      '  shop/waypoint   RequestAuthentication   shop        jwt        JWT      targetRef Service shop/web, which the pod backs: requests addressed to it',
    ].join('\n'),
  );
});

test('the dashboard without --ztunnel reads every ztunnel that announced its admin address', async (t) => {
  // The dashboard gives each fetch 1.5 s; on a loaded machine a round may miss, the next one not.
  let view = await collectMesh(mesh.admin, []);
  for (let i = 0; i < 20 && !view.ztunnels.every((z) => z.reachable && z.node); i++)
    view = await collectMesh(mesh.admin, []);
  t.deepEqual(
    view.ztunnels.map((z) => [z.address, z.node, z.reachable, z.connected]),
    [
      [`127.${BLOCK}.0.2`, 'node-a', true, true],
      [`127.${BLOCK}.0.3`, 'node-b', true, true],
    ],
  );
});
