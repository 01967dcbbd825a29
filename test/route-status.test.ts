import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ControlPlane, startAdminServer } from '@zmesh/control-plane';
import { KubeController } from '@zmesh/control-plane/kubernetes';
import { ApiServerDouble, type KubeObject } from '@zmesh/harness';
import { decodeWaypointConfig, WaypointXdsSource } from '@zmesh/waypoint';
import test from 'ava';
import { execa } from 'execa';
import { h1Request, startWaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * Issue 36, "routes that do not resolve": in controller mode an HTTPRoute whose backendRef
 * names no Service is served, not refused. Its status on the object (the API-server double)
 * says ResolvedRefs=False BackendNotFound, `zmesh proxy-status` and `zmesh describe
 * httproute` show it, and a request its rule matches gets 500 from the real waypoint, which
 * takes its config from that control plane over xDS. 127.147.0.0/16 is this file's.
 */
const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const BLOCK = 147;
const ip = (x: string) => `127.${BLOCK}.${x}`;

const objects: KubeObject[] = [
  { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'zmesh-system' } },
  {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: {
      name: 'team-b',
      labels: { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'waypoint' },
    },
  },
  {
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'Gateway',
    metadata: { name: 'waypoint', namespace: 'team-b' },
    spec: {
      gatewayClassName: 'istio-waypoint',
      listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }],
    },
  },
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'server', namespace: 'team-b' },
    spec: { clusterIP: ip('96.10'), ports: [{ port: 80, targetPort: 7000 }], selector: { app: 'server' } },
  },
  ...(['v1', 'v2'] as const).map((v, i) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `server-${v}`, namespace: 'team-b', labels: { app: 'server', version: v } },
    spec: { nodeName: 'node-b', serviceAccountName: 'server', containers: [{ name: 'app', image: 'app' }] },
    status: { phase: 'Running', podIP: ip(`2.${i + 1}`), podIPs: [{ ip: ip(`2.${i + 1}`) }] },
  })),
  {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'waypoint',
      namespace: 'team-b',
      labels: { 'gateway.networking.k8s.io/gateway-name': 'waypoint' },
    },
    spec: {
      nodeName: 'waypoint-node',
      serviceAccountName: 'waypoint',
      containers: [{ name: 'waypoint', image: 'zmesh' }],
    },
    status: { phase: 'Running', podIP: ip('0.4'), podIPs: [{ ip: ip('0.4') }] },
  },
  {
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'HTTPRoute',
    metadata: { name: 'server', namespace: 'team-b' },
    spec: {
      parentRefs: [{ group: '', kind: 'Service', name: 'server', port: 80 }],
      rules: [
        {
          matches: [{ path: { type: 'PathPrefix', value: '/missing' } }],
          backendRefs: [{ name: 'does-not-exist', port: 80 }],
        },
        { backendRefs: [{ name: 'server', port: 80 }] },
      ],
    },
  },
  {
    apiVersion: 'security.istio.io/v1',
    kind: 'AuthorizationPolicy',
    metadata: { name: 'no-blocked', namespace: 'team-b' },
    spec: {
      targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }],
      action: 'DENY',
      rules: [{ to: [{ operation: { paths: ['/blocked'] } }] }],
    },
  },
];

type Status = { parents?: Array<{ conditions: Array<{ type: string; status: string; reason: string }> }> };

test('controller mode: a route with a missing backend is ResolvedRefs=False BackendNotFound on the object, in proxy-status and describe, and its requests get 500; x describe pod names the waypoint policy that applies', async (t) => {
  t.timeout(90_000);
  const mesh = await startWaypointMesh(BLOCK);
  const api = new ApiServerDouble({ host: ip('0.9'), bookmarkIntervalMs: 200 });
  await api.start();
  for (const o of objects) api.put(o);
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-route-status-'));
  const kubeconfig = join(dir, 'kubeconfig');
  await writeFile(kubeconfig, api.kubeconfig());
  // As the daemon wires it: admission runs the waypoint's own decoder.
  const cp = new ControlPlane({
    trustDomain: 'cluster.local',
    validateWaypointConfig: (config) => {
      const decoded = decodeWaypointConfig(config, 'waypoint');
      return decoded.ok ? [] : decoded.error;
    },
  });
  const kube = new KubeController(cp, {
    kubeconfig,
    identity: 'cp-0',
    namespace: 'zmesh-system',
    leaseSeconds: 3,
    batchMs: 5,
    waypoint: {
      image: 'localhost/zmesh:test',
      xds: 'zmesh-control-plane.zmesh-system.svc:15010',
      trustDomain: 'cluster.local',
      tokenAudience: 'zmesh',
      rootsPem: '-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n',
    },
  });
  await kube.start();
  const port = await cp.start(0, ip('0.9'));
  const admin = await startAdminServer(cp, { socket: join(dir, 'cp.sock') });
  // The fixture's waypoint takes its config from this control plane, over xDS.
  let applied = 0;
  const source = new WaypointXdsSource({
    address: `${ip('0.9')}:${port}`,
    resourceName: 'team-b/waypoint',
    node: { id: `waypoint~${ip('0.4')}~waypoint.team-b~team-b.svc.cluster.local` },
    token: cp.issueNodeToken('waypoint-node'),
    apply: (doc, from) => {
      const r = mesh.waypoint.applyConfig(doc, from);
      if (r.ok) applied++;
      return r;
    },
  });
  source.start();
  t.teardown(async () => {
    source.stop();
    await admin.close();
    await kube.stop();
    await cp.stop();
    await api.close();
    await mesh.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const status = () =>
    api.get('gateway.networking.k8s.io', 'v1', 'httproutes', 'team-b', 'server')?.status as
      | Status
      | undefined;
  const conditions = () =>
    status()
      ?.parents?.[0]?.conditions.map((c) => `${c.type}=${c.status} ${c.reason}`)
      .sort();
  await until(() => conditions()?.length === 2 && applied > 0, 'route status written and config applied');
  t.deepEqual(conditions(), ['Accepted=True Accepted', 'ResolvedRefs=False BackendNotFound']);

  const run = (...argv: string[]) =>
    execa(ZMESH, [...argv, '--admin', admin.address], { reject: false, env: { ZMESH_DEBUG: '' } });
  const [table, json, described, pod] = await Promise.all([
    run('proxy-status'),
    run('proxy-status', '-o', 'json'),
    run('describe', 'httproute', 'server', '-n', 'team-b'),
    run('x', 'describe', 'pod', 'team-b/server-v1', '-o', 'json'),
  ]);
  t.is(table.exitCode, 0, table.stderr);
  const routeTable = table.stdout.slice(table.stdout.indexOf('ROUTE'));
  t.is(
    routeTable,
    [
      'ROUTE                     PARENT                  ACCEPTED   RESOLVED-REFS             MESSAGE',
      'HTTPRoute team-b/server   Service team-b/server   True       False (BackendNotFound)   no Service team-b/does-not-exist: requests sent there are answered 500',
    ].join('\n'),
  );
  const parsed = JSON.parse(json.stdout) as {
    proxies: Array<{ proxy: string }>;
    routes: Array<{
      name: string;
      parents: Array<{ waypoint: string; conditions: Array<{ reason: string }> }>;
    }>;
  };
  t.true(parsed.proxies.some((p) => p.proxy.startsWith('waypoint~')));
  t.like(parsed.routes[0], { name: 'server', parents: [{ waypoint: 'team-b/waypoint' }] });
  t.deepEqual(
    parsed.routes[0]?.parents[0]?.conditions.map((c) => c.reason),
    ['Accepted', 'BackendNotFound'],
  );
  t.is(described.exitCode, 0, described.stderr);
  t.regex(
    described.stdout,
    /Warning +ResolvedRefs=False: BackendNotFound +- +Service team-b\/server +no Service team-b\/does-not-exist/,
  );

  // x describe pod: this control plane knows no ztunnel on node-b (exit 1, one line), and
  // still says what it decides: the mTLS mode and the waypoint's L7 policy, with why.
  t.is(pod.exitCode, 1);
  t.regex(
    pod.stderr,
    /^zmesh x describe: ztunnel of node node-b: the control plane knows no ztunnel admin address/,
  );
  const described1 = JSON.parse(pod.stdout) as {
    mtls: { mode: string; why: string };
    l7Policies: Array<{ waypoint: string; name: string; action: string; why: string }>;
  };
  t.like(described1.mtls, { mode: 'STRICT' });
  t.deepEqual(
    described1.l7Policies.map((p) => [p.waypoint, p.name, p.action, p.why]),
    [
      [
        'team-b/waypoint',
        'no-blocked',
        'DENY',
        'targetRef Gateway team-b/waypoint: every request this waypoint carries',
      ],
    ],
  );
  t.is((await h1Request(mesh.ip.client, mesh.port.client, { path: '/blocked' })).status, 403);

  // Traffic gets the spec's answer: 500 for the rule whose backend does not exist, the rest served.
  const missing = await h1Request(mesh.ip.client, mesh.port.client, { path: '/missing/x' });
  t.is(missing.status, 500);
  const served = await h1Request(mesh.ip.client, mesh.port.client, { path: '/ok' });
  t.is(served.status, 200, served.body);
});

async function until(cond: () => boolean, what: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
