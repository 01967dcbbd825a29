import { type LocalMesh, PEER_SERVER, parseRateResult, RATE_CLIENT, startMesh } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import type { ResultPromise } from 'execa';

/**
 * Real capture on the local cluster (docs/design.md §3, §6, §10): unchanged clients in pods, BPF
 * redirect, ztunnel's listeners inside the pods, strict inbound. Needs root and BPF.
 */
const unavailable = await BpfCapture.unavailableReason();
const meshTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`capture mesh tests skipped: ${unavailable}`, () => {});

let mesh: LocalMesh;
const servers: ResultPromise[] = [];

const metricSum = (text: string, name: string, match: (labels: string) => boolean) =>
  text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && match(l))
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);

if (!unavailable) {
  test.before(async () => {
    mesh = await startMesh({
      run: 'cluster',
      spec: {
        nodes: ['node-a', 'node-b'],
        pods: [
          { name: 'client', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
          { name: 'pending', namespace: 'team-a', serviceAccount: 'pending', node: 'node-a' },
          { name: 'outsider', namespace: 'team-c', serviceAccount: 'outsider', node: 'node-a' },
          { name: 'server', namespace: 'team-b', serviceAccount: 'server', node: 'node-b' },
        ],
        services: [
          {
            name: 'server',
            namespace: 'team-b',
            vip: '10.244.250.10',
            ports: [{ port: 80, targetPort: 8080 }],
            pods: ['server'],
          },
        ],
      },
      enroll: (p) => p.name !== 'outsider',
      unconfigured: (p) => p.name === 'pending',
      ztunnelArgs: process.env.ZT_ARGS ? process.env.ZT_ARGS.split(' ') : [],
    });
    const server = mesh.pod('server');
    const proc = mesh.cluster.runInPod(server, ['node', '-e', PEER_SERVER, '8080'], {
      reject: false,
      stdout: 'pipe',
    });
    servers.push(proc);
    await new Promise<void>((resolve) => proc.stdout?.once('data', () => resolve()));
  });

  test.after.always(async () => {
    for (const s of servers) s.kill('SIGKILL');
    await mesh?.down();
  });
}

async function rate(pod: string, host: string, count: number, perSecond: number, timeoutMs = 3000) {
  const r = await mesh.cluster.exec(
    mesh.pod(pod),
    ['node', '-e', RATE_CLIENT, host, '8080', String(count), String(perSecond), String(timeoutMs)],
    {
      timeoutMs: (count / perSecond) * 1000 + timeoutMs + 10_000,
    },
  );
  return parseRateResult(r.stdout);
}

meshTest(
  'an unchanged client reaches a pod on the other node over IPv4, IPv6 and IPv4-mapped, through ztunnel',
  async (t) => {
    const server = mesh.pod('server');
    for (const host of [server.ipv4, server.ipv6, `::ffff:${server.ipv4}`]) {
      const r = await rate('client', host, 1, 10);
      t.is(r.ok, 1, `${host}: ${JSON.stringify(r)}`);
      t.is(r.peer?.address, host, `getpeername in the client shows ${host}`);
      const client = mesh.pod('client');
      const answer = Object.keys(r.answers)[0] ?? '';
      t.is(
        answer,
        host === server.ipv6 ? client.ipv6 : `::ffff:${client.ipv4}`,
        "the server saw the client pod's own address (source preserved by ztunnel)",
      );
    }
    const metrics = await mesh.metrics('node-b');
    const seen = metricSum(
      metrics,
      'istio_tcp_connections_opened_total',
      (l) =>
        l.includes('reporter="destination"') &&
        l.includes('source_principal="spiffe://cluster.local/ns/team-a/sa/client"'),
    );
    t.true(seen >= 3, `node-b's ztunnel attributed ${seen} connections to the client identity`);
  },
);

meshTest('a service VIP is resolved by ztunnel to its endpoint', async (t) => {
  const r = await mesh.cluster.exec(mesh.pod('client'), [
    'node',
    '-e',
    RATE_CLIENT,
    '10.244.250.10',
    '80',
    '1',
    '10',
    '3000',
  ]);
  t.is(parseRateResult(r.stdout).ok, 1, r.stdout + r.stderr);
});

meshTest(
  'a direct connection from a pod outside the mesh to a strict pod is dropped and counted',
  async (t) => {
    const before = metricSum(await mesh.metrics('node-b'), 'zmesh_capture_inbound_drops', () => true);
    const r = await rate('outsider', mesh.pod('server').ipv4, 1, 10, 1500);
    t.is(r.ok, 0, JSON.stringify(r));
    const after = metricSum(await mesh.metrics('node-b'), 'zmesh_capture_inbound_drops', () => true);
    t.true(after > before, `drops ${before} → ${after}`);
  },
);

meshTest('a pod whose configuration is missing is captured and refused, never passed through', async (t) => {
  const r = await rate('pending', mesh.pod('server').ipv4, 3, 10, 1500);
  t.is(r.ok, 0, JSON.stringify(r));
  const refused = metricSum(await mesh.metrics('node-a'), 'zmesh_capture_refused_total', (l) =>
    l.includes('pending_config'),
  );
  t.true(refused >= 3);
});

meshTest(
  '500 connections per second for 10 s from one pod: every one delivered is attributed to it',
  async (t) => {
    const id = (l: string) =>
      l.includes('reporter="destination"') &&
      l.includes('source_principal="spiffe://cluster.local/ns/team-a/sa/client"');
    const before = metricSum(await mesh.metrics('node-b'), 'istio_tcp_connections_opened_total', id);
    const other = (text: string) =>
      metricSum(
        text,
        'istio_tcp_connections_opened_total',
        (l) => l.includes('reporter="destination"') && !id(l),
      );
    const othersBefore = other(await mesh.metrics('node-b'));
    const r = await rate('client', mesh.pod('server').ipv4, 5000, 500, 5000);
    t.log(`5000 connections in ${r.ms} ms: ${r.ok} ok, ${r.failed} failed ${JSON.stringify(r.errors)}`);
    const refusals = (await mesh.metrics('node-a'))
      .split('\n')
      .filter((l) => /^zmesh_(tenant_quota_refused|capture_refused|errors)_total\{/.test(l));
    if (refusals.length > 0) t.log(refusals.join('\n'));
    // What this proves is attribution under a connect storm: every connection node-b delivered
    // carries the client's identity and none anyone else's. How many of 5000 a 2-core machine
    // carries is a throughput figure (the bench's); when it is overloaded the surplus is refused
    // by the tenant's quotas (counted above), which is the designed answer, so only a floor is
    // asserted here.
    t.true(r.ok >= 4500, `${r.ok} of 5000 connections served`);
    const text = await mesh.metrics('node-b');
    const delivered = metricSum(text, 'istio_tcp_connections_opened_total', id) - before;
    t.true(delivered >= r.ok && delivered <= 5000, `${delivered} attributed to the client, ${r.ok} answered`);
    t.is(other(text), othersBefore, 'no connection attributed to anyone else');
  },
);

meshTest('connection attempts during a ztunnel restart deliver nothing in plaintext', async (t) => {
  const server = mesh.pod('server');
  // The server sees the client's address either way (source preserved), so what went
  // through the mesh is what the destination ztunnel counted from the client's identity.
  const delivered = async () =>
    metricSum(
      await mesh.metrics('node-b'),
      'istio_tcp_connections_opened_total',
      (l) =>
        l.includes('reporter="destination"') &&
        l.includes('source_principal="spiffe://cluster.local/ns/team-a/sa/client"'),
    );
  const before = await delivered();
  const loop = rate('client', server.ipv4, 600, 100, 1000);
  await new Promise((r) => setTimeout(r, 1500));
  await mesh.restartZtunnel('node-a');
  const r = await loop;
  t.log(
    `during restart: ${r.ok} delivered through the mesh, ${r.failed} refused ${JSON.stringify(r.errors)}`,
  );
  const viaMesh = (await delivered()) - before;
  t.true(viaMesh >= r.ok, `${r.ok} answered, ${viaMesh} delivered by node-b's ztunnel: none in plaintext`);
  t.true(r.failed > 0, 'the restart window refused connections (fail closed)');
  await mesh.waitReady();
  t.is((await rate('client', server.ipv4, 1, 10)).ok, 1, 'traffic flows again after the restart');
});
