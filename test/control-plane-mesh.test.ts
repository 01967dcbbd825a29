import { createServer, type Server } from 'node:net';
import { compile, convertForZtunnel, objectKey, parseObject } from '@zmesh/control-plane';
import { podDoc, startMesh, waitFor, type XdsMesh, type XdsNode } from '@zmesh/harness';
import {
  ADDRESS_TYPE_URL,
  adminRequest,
  encodeMessage,
  generateCsr,
  isPeerAuthenticationPolicy,
  isZmeshError,
} from '@zmesh/shared';
import { decodeWaypointConfig, WaypointXdsSource } from '@zmesh/waypoint';
import { CaClient } from '@zmesh/ztunnel';
import test from 'ava';
import { echoes, startEcho, workloadUids } from './helpers/probes.js';

const BLOCK = 70;
const ip = (s: string) => `127.${BLOCK}.${s}`;
let mesh: XdsMesh;
const servers: Server[] = [];
/** Connections the fake waypoint has seen (it only counts them: no real waypoint here). */
let waypointHits = 0;

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: BLOCK,
    controlPlane: {},
    forwards: [
      { port: 18000, to: `${ip('2.1')}:7000` },
      { port: 18001, to: `${ip('96.10')}:80` },
      { port: 18002, to: `${ip('2.2')}:7000` },
      { port: 18003, to: `${ip('2.3')}:7000` },
      { port: 18004, to: `${ip('2.4')}:7000` },
    ],
  });
  for (const host of ['2.1', '2.2', '2.3', '2.4']) servers.push(await startEcho(ip(host), 7000));
  const waypoint = createServer((s) => {
    waypointHits += 1;
    s.destroy();
  });
  await new Promise<void>((r) => waypoint.listen(15008, ip('3.1'), r));
  servers.push(waypoint);
});

test.after.always(async () => {
  for (const s of servers) s.close();
  await mesh?.stop();
});

const both = (): XdsNode[] => [mesh.nodes.a, mesh.nodes.b];
const dump = (n: { z: { configDump(): unknown } }) =>
  n.z.configDump() as {
    workloads: Array<{ uid: string; addresses: string[]; waypoint?: { hostname?: { hostname: string } } }>;
    services: Array<{ hostname: string; waypoint?: { hostname?: { hostname: string } } }>;
  };

test.serial(
  'a workload added, changed and removed in YAML reaches both proxies and takes effect on traffic',
  async (t) => {
    const uid = 'Kubernetes//Pod/team-b/server2';
    t.true(await echoes(ip('1.1'), 18000), 'baseline traffic flows');
    t.false(await echoes(ip('1.1'), 18002), 'an unknown destination is refused');

    let start = Date.now();
    t.true(mesh.cp.store.apply([podDoc('team-b', 'server2', ip('2.2'), 'node-b', { app: 'server' })]).ok);
    await waitFor(() => both().every((n) => workloadUids(n.z).includes(uid)), 5000);
    t.log(`added: both proxies active after ${Date.now() - start} ms`);
    await waitFor(() => mesh.nodes.b.z.readiness().ready, 5000);
    t.true(await echoes(ip('1.1'), 18002), 'the added workload is reachable');

    start = Date.now();
    t.true(mesh.cp.store.apply([podDoc('team-b', 'server2', ip('2.3'), 'node-b', { app: 'server' })]).ok);
    const moved = (n: XdsNode) => dump(n).workloads.find((w) => w.uid === uid)?.addresses[0] === ip('2.3');
    await waitFor(() => both().every(moved), 5000);
    t.log(`changed: both proxies active after ${Date.now() - start} ms`);
    await waitFor(() => mesh.nodes.b.z.readiness().ready, 5000);
    t.true(await echoes(ip('1.1'), 18003), 'the new address is reachable');
    t.false(await echoes(ip('1.1'), 18002), 'the old address is not');

    t.true(mesh.cp.store.remove([`Pod/team-b/server2`]).ok);
    await waitFor(() => both().every((n) => !workloadUids(n.z).includes(uid)), 5000);
    t.false(await echoes(ip('1.1'), 18003), 'the removed workload is refused');
    t.true(await echoes(ip('1.1'), 18000), 'others are untouched');
  },
);

test.serial(
  'an AuthorizationPolicy in YAML reaches the destination ztunnel as one Authorization and is enforced',
  async (t) => {
    const policy = {
      apiVersion: 'security.istio.io/v1',
      kind: 'AuthorizationPolicy',
      metadata: { name: 'deny-team-a', namespace: 'team-b' },
      spec: { action: 'DENY', rules: [{ from: [{ source: { namespaces: ['team-a'] } }] }] },
    };
    t.true(mesh.cp.store.apply([policy]).ok);
    await waitFor(() => mesh.nodes.b.z.authorizer.store.list().some((p) => p.name === 'deny-team-a'), 5000);
    t.false(await echoes(ip('1.1'), 18000), 'denied at the destination');
    t.true(mesh.cp.store.remove(['AuthorizationPolicy/team-b/deny-team-a']).ok);
    await waitFor(
      () => mesh.nodes.b.z.authorizer.store.list().every((p) => isPeerAuthenticationPolicy(p.name)),
      5000,
    );
    t.true(await echoes(ip('1.1'), 18000), 'allowed again once removed');
  },
);

test.serial(
  'an invalid resource is NACKed with its reason in proxy status while traffic keeps flowing',
  async (t) => {
    const bad = encodeMessage('istio.workload.Address', {
      workload: {
        uid: 'Kubernetes//Pod/team-b/bad',
        name: 'bad',
        namespace: 'team-b',
        addresses: [Uint8Array.from([10, 0, 0])],
      },
    });
    mesh.cp.server.injectRawResource(ADDRESS_TYPE_URL, 'Kubernetes//Pod/team-b/bad', bad);
    const rejected = () =>
      mesh.cp
        .proxyStatus()
        .filter((p) => p.connected)
        .map((p) => p.types[ADDRESS_TYPE_URL]?.rejected.find((r) => r.name === 'Kubernetes//Pod/team-b/bad'));
    await waitFor(() => rejected().length === 2 && rejected().every((r) => r !== undefined), 5000);
    t.log(rejected()[0]!.reason);
    t.regex(rejected()[0]!.reason, /address/i);
    t.true(mesh.cp.proxyStatus().every((p) => p.types[ADDRESS_TYPE_URL]?.state === 'NACKED'));
    t.true(await echoes(ip('1.1'), 18000), 'traffic keeps flowing on the last good config');
    t.true(await echoes(ip('1.1'), 18001), 'through the service VIP too');
  },
);

test.serial(
  'a workload naming a waypoint not yet received is pending and fails closed until it arrives',
  async (t) => {
    const uid = 'Kubernetes//Pod/team-b/server4';
    const server4 = podDoc('team-b', 'server4', ip('2.4'), 'node-b', { 'istio.io/use-waypoint': 'wp' });
    const refused = mesh.cp.store.apply([server4]);
    t.regex(refused.ok ? '' : (refused.error[0] ?? ''), /names waypoint team-b\/wp, but no Gateway/);
    // Admission keeps the store from naming a waypoint it lacks, but a proxy can still meet
    // one (workloads pushed ahead of their waypoint): serve it from below admission.
    const objects = new Map(mesh.cp.store.view().objects);
    const parsed = parseObject(server4, []);
    if (parsed === undefined) return t.fail();
    objects.set(objectKey(parsed), parsed);
    mesh.cp.server.setConfig(
      compile({ generation: 0, objects }, { trustDomain: 'cluster.local', convertPolicy: convertForZtunnel }),
    );
    await waitFor(() => both().every((n) => n.source.pending().some((p) => p.name === uid)), 5000);
    const pending = mesh.nodes.a.source.pending().find((p) => p.name === uid)!;
    t.deepEqual(pending.missing, ['team-b/wp.team-b.svc.cluster.local']);
    t.false(workloadUids(mesh.nodes.a.z).includes(uid), 'not active while pending');
    t.false(await echoes(ip('1.1'), 18004), 'traffic to it fails closed');
    t.is(waypointHits, 0);

    t.true(
      mesh.cp.store.apply([
        {
          kind: 'Gateway',
          metadata: { name: 'wp', namespace: 'team-b' },
          spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: ip('3.1') }] },
        },
        podDoc('team-b', 'wp', ip('3.1'), 'node-w', { 'gateway.networking.k8s.io/gateway-name': 'wp' }),
        server4,
      ]).ok,
    );
    await waitFor(() => both().every((n) => n.source.pending().length === 0), 5000);
    const active = dump(mesh.nodes.a).workloads.find((w) => w.uid === uid);
    t.is(active?.waypoint?.hostname?.hostname, 'wp.team-b.svc.cluster.local');
    await echoes(ip('1.1'), 18004, 1000);
    t.true(waypointHits > 0, 'the tunnel now goes to the waypoint, never straight to the pod');
  },
);

/** A waypoint's xDS side for team-b/wp (the fake waypoint at 3.1 is its data plane): it ACKs the config. */
function connectWaypoint(): WaypointXdsSource {
  const source = new WaypointXdsSource({
    address: `${ip('0.1')}:${mesh.xdsPort}`,
    resourceName: 'team-b/wp',
    node: { id: `waypoint~${ip('3.1')}~wp.team-b~svc.cluster.local` },
    token: mesh.cp.issueNodeToken('node-w'),
    apply: (doc, from) => decodeWaypointConfig(doc, from),
  });
  source.start();
  return source;
}
const wpStatus = () => mesh.cp.waypointStatus().find((w) => w.waypoint === 'team-b/wp');

test.serial(
  'ns l7 on with no waypoint ready keeps the namespace on its direct path and says so; its ACK switches it; a ready waypoint that disconnects fails closed, never bypassed',
  async (t) => {
    const post = async (state: 'on' | 'off', timeoutMs = '5000') => {
      const q = new URLSearchParams({ namespace: 'team-b', state, waypoint: 'wp', timeoutMs });
      const res = await adminRequest(mesh.admin, `/namespace-l7?${q}`, { method: 'POST' });
      return {
        status: res.status,
        body: res.json<{ acked: string[]; notAcked: Array<{ proxy: string; state: string }> }>(),
      };
    };
    const wp = 'wp.team-b.svc.cluster.local';
    const onWaypoint = (n: XdsNode) => {
      const d = dump(n);
      const server = d.workloads.find((w) => w.uid === 'Kubernetes//Pod/team-b/server');
      const svc = d.services.find((s) => s.hostname === 'server.team-b.svc.cluster.local');
      return [server?.waypoint?.hostname?.hostname, svc?.waypoint?.hostname?.hostname];
    };
    const metrics = async () => (await adminRequest(mesh.admin, '/metrics')).text;
    const on = await post('on', '1000');
    // Both ztunnels ACK; no waypoint proxy runs for team-b/wp, so `on` says so and fails.
    t.is(on.status, 504, JSON.stringify(on.body));
    t.is(on.body.acked.length, 2);
    t.deepEqual(on.body.notAcked, [
      {
        proxy: 'waypoint team-b/wp',
        node: '',
        state: 'NOT_CONNECTED',
        reason:
          'no waypoint for this Gateway is connected; the namespace traffic stays on its previous path until one ACKs',
      },
    ]);
    // (a) Not cut: the server pod and its service stay direct until the waypoint ACKs.
    for (const n of both()) t.deepEqual(onWaypoint(n), [undefined, undefined]);
    const hits = waypointHits;
    t.true(await echoes(ip('1.1'), 18000), 'still flows, directly through the ztunnels');
    t.is(waypointHits, hits, 'not through the waypoint');
    t.like(wpStatus(), { ready: false, held: 2 });
    t.deepEqual(
      mesh.cp.heldUsers().map((h) => [h.object, h.keptOn]),
      [
        ['Pod/team-b/server', undefined],
        ['Service/team-b/server', undefined],
      ],
    );
    t.regex(await metrics(), /^zmesh_cp_waypoint_users_held 2$/m);

    const source = connectWaypoint();
    t.teardown(() => source.stop());
    await waitFor(() => both().every((n) => onWaypoint(n).every((h) => h === wp)), 5000);
    t.like(wpStatus(), { ready: true, held: 0 });
    t.regex(await metrics(), /^zmesh_cp_waypoint_users_held 0$/m);
    await echoes(ip('1.1'), 18000, 1000);
    t.true(waypointHits > hits, 'after its ACK the traffic goes through the waypoint');
    const waypointPod = dump(mesh.nodes.a).workloads.find((w) => w.uid === 'Kubernetes//Pod/team-b/wp');
    t.is(waypointPod?.waypoint, undefined, 'the waypoint itself never goes through a waypoint');

    // (b) The waypoint disconnects: its users stay bound (fail closed), also across a recompile.
    source.stop();
    await waitFor(() => wpStatus()?.ready === false, 5000);
    t.true(mesh.cp.store.apply([podDoc('team-b', 'server3', ip('2.3'), 'node-b', { app: 'other' })]).ok);
    await waitFor(
      () => both().every((n) => workloadUids(n.z).includes('Kubernetes//Pod/team-b/server3')),
      5000,
    );
    for (const n of both()) t.deepEqual(onWaypoint(n), [wp, wp], 'still bound to the waypoint');
    t.like(wpStatus(), { ready: false, held: 0 });
    const before = waypointHits;
    t.false(await echoes(ip('1.1'), 18000), 'refused: the fake waypoint closes it');
    t.true(waypointHits > before, 'sent to the waypoint, not around it');
    t.true(mesh.cp.store.remove(['Pod/team-b/server3']).ok);

    const off = await post('off');
    t.is(off.status, 200);
    for (const n of both()) t.deepEqual(onWaypoint(n), [undefined, undefined]);
    t.true(await echoes(ip('1.1'), 18000), 'direct again');
  },
);

test.serial('ns l7 names the proxies that did not ACK in time', async (t) => {
  // A ready waypoint, so `on` changes what the ztunnels serve at once.
  const source = connectWaypoint();
  t.teardown(() => source.stop());
  await waitFor(() => wpStatus()?.ready === true, 5000);
  const q = new URLSearchParams({ namespace: 'team-b', state: 'on', waypoint: 'wp', timeoutMs: '0' });
  const res = await adminRequest(mesh.admin, `/namespace-l7?${q}`, { method: 'POST' });
  const body = res.json<{ notAcked: Array<{ proxy: string }> }>();
  // With no time to wait, at least one proxy cannot have ACKed the push yet.
  t.is(res.status, 504);
  const ztunnels = body.notAcked.filter((p) => !p.proxy.startsWith('waypoint'));
  t.true(ztunnels.length > 0 && ztunnels.every((p) => p.proxy.startsWith('ztunnel~')), JSON.stringify(body));
  const unknown = await adminRequest(mesh.admin, '/namespace-l7?namespace=nope&state=on', { method: 'POST' });
  t.is(unknown.status, 400);
  t.regex(unknown.json<{ reasons: string[] }>().reasons[0] ?? '', /namespace nope has no waypoint/);
  await adminRequest(mesh.admin, '/namespace-l7?namespace=team-b&state=off', { method: 'POST' });
});

test.serial(
  "a ztunnel asking for another node's workload certificate, or using another node's token, is refused",
  async (t) => {
    const address = `${ip('0.1')}:${mesh.xdsPort}`;
    const serverId = 'spiffe://cluster.local/ns/team-b/sa/server';
    const { csrPem } = await generateCsr(serverId);
    const asNodeA = new CaClient({
      address,
      token: () => mesh.tokenFor('node-a'),
      bundle: mesh.nodes.a.bundle,
    });
    const e1 = await t.throwsAsync(asNodeA.sign(csrPem, serverId, 3600));
    t.true(isZmeshError(e1, 'ZM_ERR_CA_REFUSED'), String(e1?.message));
    t.regex(e1!.message, /not the identity of a workload scheduled on node node-a/);
    asNodeA.close();
    const forged = new CaClient({ address, token: () => 'zmn1.bm9kZS1i.AAAA', bundle: mesh.nodes.a.bundle });
    const e2 = await t.throwsAsync(forged.sign(csrPem, serverId, 3600));
    t.true(isZmeshError(e2, 'ZM_ERR_CA_REFUSED'));
    forged.close();

    // A ztunnel for node-b presenting node-a's token: xDS refuses it, so it gets no config
    // and serves nothing; its CA requests would be checked against node-a's workloads.
    const impostor = await mesh.startNode('node-b', ip('0.9'), { token: mesh.tokenFor('node-a') });
    const status = await new Promise<{ code: number; details: string }>((r) =>
      impostor.source.client.once('disconnected', r),
    );
    t.is(status.code, 7, status.details); // PERMISSION_DENIED
    t.regex(status.details, /token is for node node-a, not node-b/);
    t.is(impostor.z.localWorkloads().length, 0, 'it received nothing and serves nothing');
    // docs/design.md §5: no complete snapshot, so not ready, and it says why.
    const readiness = impostor.z.readiness();
    t.false(readiness.ready);
    t.regex(readiness.reasons[0] ?? '', /no configuration: control plane unreachable/);
    await impostor.stop();
  },
);
