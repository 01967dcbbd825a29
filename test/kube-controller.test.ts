import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DiscoveryV1Api, KubeConfig } from '@kubernetes/client-node';
import { ControlPlane, compile } from '@zmesh/control-plane';
import { KubeController } from '@zmesh/control-plane/kubernetes';
import { ApiServerDouble, type KubeObject } from '@zmesh/harness';
import { ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL, XdsClient } from '@zmesh/shared';
import { decodeWaypointConfig } from '@zmesh/waypoint';
import { ProxyState } from '@zmesh/ztunnel';
import test, { type ExecutionContext } from 'ava';
import { execa } from 'execa';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

/**
 * `zmesh control-plane --kubernetes` against the API-server double, with the real
 * @kubernetes/client-node above HTTP: informers feed the ConfigStore, the leader writes
 * waypoint objects and status, and two replicas share a Lease.
 */

const ns = (name: string, labels: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Namespace',
  metadata: { name, labels },
});
const pod = (name: string, ip: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'shop', labels: { app: name } },
  spec: { nodeName: 'node-1', serviceAccountName: 'default', containers: [{ name: 'app', image: 'app' }] },
  status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
});
const gateway = (name = 'waypoint', className = 'zmesh-waypoint'): KubeObject => ({
  apiVersion: 'gateway.networking.k8s.io/v1',
  kind: 'Gateway',
  metadata: { name, namespace: 'shop' },
  spec: { gatewayClassName: className, listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }] },
});

async function until(cond: () => boolean, what: string, ms = 8000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function cluster(t: ExecutionContext, objects: KubeObject[]) {
  const api = new ApiServerDouble({ host: '127.34.0.2', bookmarkIntervalMs: 200 });
  await api.start();
  api.put(ns('zmesh-system'));
  for (const o of objects) api.put(o);
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-kube-'));
  const kubeconfig = join(dir, 'kubeconfig');
  await writeFile(kubeconfig, api.kubeconfig());
  const started: Array<{ cp: ControlPlane; kube: KubeController }> = [];
  t.teardown(async () => {
    for (const r of started) {
      await r.kube.stop();
      await r.cp.stop();
    }
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });
  const replica = async (identity: string) => {
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
      identity,
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
    const port = await cp.start(0, '127.0.0.1');
    started.push({ cp, kube });
    return { cp, kube, port };
  };
  return { api, replica, kubeconfig, dir };
}

const has = (cp: ControlPlane, key: string) => cp.store.view().objects.has(key);

test('informers feed the store; a watch resumed after compaction gets 410 and the relist keeps the store in step', async (t) => {
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    pod('a', '10.34.0.1'),
  ]);
  const { cp } = await replica('cp-0');
  t.true(has(cp, 'Pod/shop/a'), 'the first list is committed before xDS serves');
  api.put(pod('b', '10.34.0.2'));
  await until(() => has(cp, 'Pod/shop/b'), 'pod b over the watch');
  const lists = () =>
    api.requests.filter((r) => r.path === '/api/v1/pods' && !r.query.includes('watch')).length;
  t.is(lists(), 1);
  // In one turn: watches end, a pod goes, one comes, and history is compacted past them.
  api.closeWatches();
  api.remove(pod('a', ''));
  api.put(pod('c', '10.34.0.3'));
  api.compact();
  await until(() => has(cp, 'Pod/shop/c') && !has(cp, 'Pod/shop/a'), 'the relist');
  t.true(lists() >= 2, 'the pods informer relisted after 410 Gone');
  t.true(has(cp, 'Pod/shop/b'));
  // A pod without an IP yet is not served; its IP arriving (a status write) serves it.
  api.put({ ...pod('d', '10.34.0.4'), status: { phase: 'Pending' } });
  await new Promise((r) => setTimeout(r, 100));
  t.false(has(cp, 'Pod/shop/d'));
  api.put(pod('d', '10.34.0.4'));
  await until(() => has(cp, 'Pod/shop/d'), 'pod d once it has an IP');
});

test('ns l7 on|off labels the Namespace through the API, and the label reaches the compiled config', async (t) => {
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    pod('a', '10.34.1.1'),
    gateway(),
  ]);
  const { cp } = await replica('cp-0');
  // No waypoint runs here: the pod is bound to it but held on its direct path (issue 33).
  const users = () => {
    const w = cp.waypointStatus().find((w) => w.waypoint === 'shop/waypoint');
    return w ? w.users + w.held : -1;
  };
  t.is(users(), 0);
  const on = await cp.setNamespaceL7('shop', 'waypoint', 3000);
  t.true(on.ok, JSON.stringify(on));
  t.is(api.get('', 'v1', 'namespaces', '', 'shop')?.metadata.labels?.['istio.io/use-waypoint'], 'waypoint');
  t.true(users() > 0, 'the pod is now bound to the waypoint');
  const off = await cp.setNamespaceL7('shop', undefined, 3000);
  t.true(off.ok);
  t.is(api.get('', 'v1', 'namespaces', '', 'shop')?.metadata.labels?.['istio.io/use-waypoint'], undefined);
  t.is(users(), 0);
  // kubectl label does the same, through the informer.
  api.put(ns('shop', { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'waypoint' }));
  await until(() => users() > 0, 'the kubectl-style label');
});

test('a waypoint Gateway gets an owned ServiceAccount, ConfigMap, Deployment and Service; status is written; deleting it collects them', async (t) => {
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    gateway(),
  ]);
  await replica('cp-0');
  const deployment = () => api.get('apps', 'v1', 'deployments', 'shop', 'waypoint');
  await until(
    () => deployment() !== undefined && api.get('', 'v1', 'services', 'shop', 'waypoint') !== undefined,
    'the waypoint Deployment and Service',
  );
  const gw = api.get('gateway.networking.k8s.io', 'v1', 'gateways', 'shop', 'waypoint') as KubeObject;
  const d = deployment() as KubeObject;
  t.notThrows(() => new Deployment(d as never).validate());
  t.like((d.metadata as { ownerReferences: unknown[] }).ownerReferences[0], {
    kind: 'Gateway',
    name: 'waypoint',
    uid: gw.metadata.uid,
    controller: true,
  });
  const container = (
    d as unknown as { spec: { template: { spec: { containers: Array<{ args: string[] }> } } } }
  ).spec.template.spec.containers[0];
  t.deepEqual(container?.args.slice(0, 3), ['waypoint', '--gateway', 'shop/waypoint']);
  for (const [g, r, name] of [
    ['', 'serviceaccounts', 'waypoint'],
    ['', 'services', 'waypoint'],
    ['', 'configmaps', 'waypoint-zmesh-roots'],
  ] as const)
    t.truthy(api.get(g, 'v1', r, 'shop', name), `${r}/${name}`);
  // Status: Accepted, not Programmed (no waypoint proxy is connected), the Service's address.
  await until(() => {
    const s = api.get('gateway.networking.k8s.io', 'v1', 'gateways', 'shop', 'waypoint')?.status as
      | { addresses?: unknown[] }
      | undefined;
    return (s?.addresses?.length ?? 0) > 0;
  }, 'Gateway status');
  const status = api.get('gateway.networking.k8s.io', 'v1', 'gateways', 'shop', 'waypoint')?.status as {
    conditions: Array<{ type: string; status: string; reason: string }>;
    addresses: Array<{ value: string }>;
  };
  t.like(
    status.conditions.find((c) => c.type === 'Programmed'),
    { status: 'False', reason: 'Pending' },
  );
  t.like(
    status.conditions.find((c) => c.type === 'Accepted'),
    { status: 'True' },
  );
  t.is(
    status.addresses[0]?.value,
    (api.get('', 'v1', 'services', 'shop', 'waypoint')?.spec as { clusterIP?: string } | undefined)
      ?.clusterIP,
  );
  // A change to what the controller owns is put back.
  api.put({ ...(deployment() as KubeObject), spec: { ...(d.spec as object), replicas: 7 } });
  await until(
    () => (deployment()?.spec as { replicas: number } | undefined)?.replicas === 1,
    'the Deployment put back in step',
  );
  api.remove(gw);
  await until(() => deployment() === undefined, 'the Deployment collected');
  await until(() => api.get('', 'v1', 'services', 'shop', 'waypoint') === undefined, 'the Service collected');
  await until(
    () => api.get('', 'v1', 'serviceaccounts', 'shop', 'waypoint') === undefined,
    'the ServiceAccount collected',
  );
});

test('HTTPRoute and refused AuthorizationPolicy status; a stale status write (409) is re-read and retried', async (t) => {
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'waypoint' }),
    gateway(),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'shop' },
      spec: { clusterIP: '10.96.34.20', ports: [{ port: 80, targetPort: 8080 }], selector: { app: 'web' } },
    },
  ]);
  const { kube, cp } = await replica('cp-0');
  // Race the controller once: just before its first status write of the route, someone else
  // changes the route, so the write carries a stale resourceVersion.
  let raced = false;
  api.beforeRequest = (method, path) => {
    if (!raced && method === 'PUT' && path.endsWith('/httproutes/r/status')) {
      raced = true;
      const r = api.get('gateway.networking.k8s.io', 'v1', 'httproutes', 'shop', 'r') as KubeObject;
      api.put({ ...r, metadata: { ...r.metadata, labels: { touched: 'yes' } } });
    }
  };
  api.put({
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'HTTPRoute',
    metadata: { name: 'r', namespace: 'shop' },
    spec: {
      parentRefs: [{ group: '', kind: 'Service', name: 'web', port: 80 }],
      rules: [{ backendRefs: [{ name: 'missing', port: 80 }] }],
    },
  });
  api.put({
    apiVersion: 'security.istio.io/v1',
    kind: 'AuthorizationPolicy',
    metadata: { name: 'bad', namespace: 'shop' },
    spec: { action: 'REJECT' },
  });
  const routeStatus = () =>
    api.get('gateway.networking.k8s.io', 'v1', 'httproutes', 'shop', 'r')?.status as
      | {
          parents: Array<{
            controllerName: string;
            conditions: Array<{ type: string; status: string; reason: string }>;
          }>;
        }
      | undefined;
  await until(() => routeStatus()?.parents?.length === 1, 'HTTPRoute status');
  t.true(raced);
  t.true(kube.writer.conflicts >= 1, 'the 409 was met and retried');
  const parent = routeStatus()?.parents[0];
  t.is(parent?.controllerName, 'zmesh.io/waypoint-controller');
  t.like(
    parent?.conditions.find((c) => c.type === 'ResolvedRefs'),
    { status: 'False', reason: 'BackendNotFound' },
  );
  t.like(
    parent?.conditions.find((c) => c.type === 'Accepted'),
    { status: 'True', reason: 'Accepted', message: 'programmed in waypoint shop/waypoint' },
  );
  // The same status as the control plane's /route-status (what proxy-status prints).
  t.deepEqual(
    cp
      .routeStatus()
      .find((r) => r.name === 'r')
      ?.parents[0]?.conditions.map((c) => `${c.type}=${c.status} ${c.reason}`),
    ['Accepted=True Accepted', 'ResolvedRefs=False BackendNotFound'],
  );
  const policyStatus = () =>
    api.get('security.istio.io', 'v1', 'authorizationpolicies', 'shop', 'bad')?.status as
      | { conditions: Array<{ type: string; status: string; reason: string; message: string }> }
      | undefined;
  await until(() => policyStatus()?.conditions !== undefined, 'AuthorizationPolicy status');
  t.like(policyStatus()?.conditions[0], { type: 'Accepted', status: 'False', reason: 'Invalid' });
  t.regex(policyStatus()?.conditions[0]?.message ?? '', /spec\.action/);
  t.false(has(cp, 'AuthorizationPolicy/shop/bad'), 'the refused policy is not served');
  const notServed = cp.notServed().filter((n) => n.object === 'AuthorizationPolicy/shop/bad');
  t.is(notServed.length, 1, 'proxy-status lists it as not served');
  t.regex(notServed[0]?.reason ?? '', /^kept out by admission: .*spec\.action/);
  const metrics = await cp.metrics.registry.metrics();
  t.regex(metrics, /^zmesh_cp_kubernetes_refused_objects 1$/m);
  t.regex(metrics, /^zmesh_cp_kubernetes_leader 1$/m);
  t.true(has(cp, 'HTTPRoute/shop/r'), 'the rest of the batch is');
});

test('a GRPCRoute in the API reaches its waypoint config and gets Accepted/ResolvedRefs; one naming no Service is ResolvedRefs=False BackendNotFound', async (t) => {
  const service = (name: string, ip: string): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'shop' },
    spec: { clusterIP: ip, ports: [{ name: 'grpc', port: 80, targetPort: 8080 }], selector: { app: name } },
  });
  const grpcRoute = (name: string, backend: string): KubeObject => ({
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'GRPCRoute',
    metadata: { name, namespace: 'shop' },
    spec: {
      parentRefs: [{ group: '', kind: 'Service', name: 'echo', port: 80 }],
      rules: [
        {
          matches: [{ method: { service: 'pkg.Echo', method: name === 'ok' ? 'Echo' : 'Other' } }],
          backendRefs: [{ name: backend, port: 80 }],
        },
      ],
    },
  });
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'waypoint' }),
    gateway(),
    service('echo', '10.96.34.30'),
    service('echo-v2', '10.96.34.31'),
  ]);
  const { cp } = await replica('cp-0');
  api.put(grpcRoute('ok', 'echo-v2'));
  api.put(grpcRoute('lost', 'nowhere'));
  const conditions = (name: string) =>
    (
      api.get('gateway.networking.k8s.io', 'v1', 'grpcroutes', 'shop', name)?.status as
        | { parents?: Array<{ conditions: Array<{ type: string; status: string; reason: string }> }> }
        | undefined
    )?.parents?.[0]?.conditions
      .map((c) => `${c.type}=${c.status} ${c.reason}`)
      .sort();
  await until(
    () => conditions('ok')?.length === 2 && conditions('lost')?.length === 2,
    'GRPCRoute status written',
  );
  t.deepEqual(conditions('ok'), ['Accepted=True Accepted', 'ResolvedRefs=True ResolvedRefs']);
  t.deepEqual(conditions('lost'), ['Accepted=True Accepted', 'ResolvedRefs=False BackendNotFound']);
  const wp = compile(cp.store.view(), { trustDomain: 'cluster.local' }).waypoints?.find(
    (w) => w.name === 'shop/waypoint',
  );
  const served = ((wp?.config.grpcRoutes ?? []) as Array<{ name: string }>).map((r) => r.name).sort();
  t.deepEqual(served, ['lost', 'ok'], 'both routes are in the waypoint config');
  const decoded = decodeWaypointConfig(wp?.config, 'waypoint');
  t.true(decoded.ok, 'the waypoint decodes that config');
  // Deleted from the API: out of the served config.
  api.remove(grpcRoute('lost', 'nowhere'));
  await until(() => !has(cp, 'GRPCRoute/shop/lost'), 'GRPCRoute removed');
  t.true(has(cp, 'GRPCRoute/shop/ok'));
});

test('EndpointSlices: ready/terminating decide who takes new connections, a selector-less Service takes its hand-made slice, addresses without a pod are plain endpoints', async (t) => {
  const slice = (
    name: string,
    service: string,
    endpoints: Array<{ ip: string; ready?: boolean; terminating?: boolean; pod?: string }>,
  ): KubeObject => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: 'shop', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: {
        ready: e.ready ?? true,
        serving: e.ready ?? true,
        terminating: e.terminating ?? false,
      },
      ...(e.pod ? { targetRef: { kind: 'Pod', namespace: 'shop', name: e.pod } } : {}),
    })),
  });
  const webPod = (name: string, ip: string): KubeObject => ({
    ...pod(name, ip),
    metadata: { name, namespace: 'shop', labels: { app: 'web' } },
  });
  const { api, replica, kubeconfig } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'shop' },
      spec: {
        clusterIP: '10.96.34.40',
        ports: [{ name: 'http', port: 80, targetPort: 8080 }],
        selector: { app: 'web' },
      },
    },
    // No selector: its endpoints are the slice below, kept by hand (an external database, a pod).
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'db', namespace: 'shop' },
      spec: { clusterIP: '10.96.34.41', ports: [{ name: 'http', port: 80 }] },
    },
    webPod('web-a', '10.34.2.1'),
    webPod('web-b', '10.34.2.2'),
    pod('helper', '10.34.2.3'),
    slice('web-abc', 'web', [
      { ip: '10.34.2.1', pod: 'web-a' },
      // Being deleted: still serving its connections, not ready for new ones.
      { ip: '10.34.2.2', pod: 'web-b', ready: false, terminating: true },
    ]),
    slice('db-1', 'db', [{ ip: '192.0.2.10' }, { ip: '192.0.2.11', ready: false }, { ip: '10.34.2.3' }]),
  ]);
  const { cp } = await replica('cp-0');
  const workloads = () =>
    new Map(
      compile(cp.store.view(), { trustDomain: 'cluster.local' }).workloads.map((w) => [
        w.addresses[0] ?? '',
        w,
      ]),
    );
  await until(() => workloads().has('192.0.2.10'), 'slice endpoints compiled');
  let w = workloads();
  t.is(w.get('10.34.2.1')?.status, 'HEALTHY');
  t.is(w.get('10.34.2.2')?.status, 'UNHEALTHY', 'terminating: no new connections');
  t.deepEqual(Object.keys(w.get('10.34.2.2')?.services ?? {}), ['shop/web.shop.svc.cluster.local']);
  const db = 'shop/db.shop.svc.cluster.local';
  t.like(w.get('192.0.2.10'), {
    uid: 'Kubernetes/discovery.k8s.io/EndpointSlice/shop/db-1/192.0.2.10',
    tunnelProtocol: 'NONE',
    status: 'HEALTHY',
    services: { [db]: [{ servicePort: 80, targetPort: 8080 }] },
  });
  t.is(w.get('192.0.2.11')?.status, 'UNHEALTHY', 'not ready');
  // A mesh pod at a hand-made slice's address serves that Service, as a mesh (HBONE) workload.
  t.like(w.get('10.34.2.3'), { tunnelProtocol: 'HBONE', status: 'HEALTHY' });
  t.deepEqual(w.get('10.34.2.3')?.services[db], [{ servicePort: 80, targetPort: 8080 }]);
  t.is([...w.values()].filter((x) => x.addresses[0] === '10.34.2.2').length, 1, 'no plain twin of a pod');
  // What ztunnel makes of it: new connections to a VIP go only to ready, non-terminating endpoints.
  const compiled = compile(cp.store.view(), { trustDomain: 'cluster.local' });
  const state = new ProxyState({ workloads: compiled.workloads, services: compiled.services, version: 1 });
  const picked = (vip: string) => {
    const seen = new Set<string>();
    for (let i = 0; i < 60; i++) {
      const r = state.resolve(vip, 80);
      if (r instanceof Error) throw r;
      seen.add(r.kind === 'hbone' ? `hbone ${r.authority.host}` : `plain ${r.target.host}:${r.target.port}`);
    }
    return [...seen].sort();
  };
  t.deepEqual(
    picked('10.96.34.40'),
    ['hbone 10.34.2.1'],
    'web: only web-a; the terminating web-b takes none',
  );
  t.deepEqual(
    picked('10.96.34.41'),
    ['hbone 10.34.2.3', 'plain 192.0.2.10:8080'],
    'db: the mesh pod over HBONE, the plain address in plaintext; the not-ready one takes none',
  );

  // The double answers a label selector on the slices, as the API server does.
  const client = new KubeConfig();
  client.loadFromFile(kubeconfig);
  const listed = await client
    .makeApiClient(DiscoveryV1Api)
    .listNamespacedEndpointSlice({ namespace: 'shop', labelSelector: 'kubernetes.io/service-name=db' });
  t.deepEqual(
    listed.items.map((i) => i.metadata?.name),
    ['db-1'],
  );

  // Watched: web-b ready again, one db address gone, then the slice deleted.
  api.put(
    slice('web-abc', 'web', [
      { ip: '10.34.2.1', pod: 'web-a' },
      { ip: '10.34.2.2', pod: 'web-b' },
    ]),
  );
  api.put(slice('db-1', 'db', [{ ip: '192.0.2.10' }]));
  await until(
    () => workloads().get('10.34.2.2')?.status === 'HEALTHY' && !workloads().has('192.0.2.11'),
    'slice updates compiled',
  );
  api.remove(slice('db-1', 'db', []));
  await until(() => !workloads().has('192.0.2.10'), 'slice deletion compiled');
  w = workloads();
  t.deepEqual(Object.keys(w.get('10.34.2.3')?.services ?? {}), [], 'the pod no longer serves db');
  t.is(w.get('10.34.2.1')?.status, 'HEALTHY');
});

test('Pod readiness: Ready=False makes the workload UNHEALTHY in the pushed snapshot before its EndpointSlice says so, Service or not; ztunnel sends it no new connection', async (t) => {
  const readyPod = (name: string, ip: string, ready: boolean, app = 'web'): KubeObject => ({
    ...pod(name, ip),
    metadata: { name, namespace: 'shop', labels: { app } },
    status: {
      phase: 'Running',
      podIP: ip,
      podIPs: [{ ip }],
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Ready', status: ready ? 'True' : 'False' },
      ],
    },
  });
  const webSlice = (
    endpoints: Array<{ pod: string; ip: string; ready?: boolean; terminating?: boolean }>,
  ) => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'shop', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: { ready: e.ready ?? true, serving: e.ready ?? true, terminating: e.terminating ?? false },
      targetRef: { kind: 'Pod', namespace: 'shop', name: e.pod },
    })),
  });
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'shop' },
      spec: {
        clusterIP: '10.96.34.50',
        ports: [{ name: 'http', port: 80, targetPort: 8080 }],
        selector: { app: 'web' },
      },
    },
    readyPod('web-a', '10.34.3.1', true),
    readyPod('web-b', '10.34.3.2', true),
    // No Service selects it: its workload's status is still its readiness.
    readyPod('batch', '10.34.3.9', true, 'batch'),
    webSlice([
      { pod: 'web-a', ip: '10.34.3.1' },
      { pod: 'web-b', ip: '10.34.3.2' },
    ]),
  ]);
  const { cp, port } = await replica('cp-0');
  // What a ztunnel on node-1 is pushed, over its own ADS stream.
  const xds = new XdsClient({
    address: `127.0.0.1:${port}`,
    node: { id: 'ztunnel~10.34.0.1~ztunnel-node-1.istio-system~istio-system.svc.cluster.local' },
    token: cp.issueNodeToken('node-1'),
    typeUrls: [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL],
    backoff: { initialMs: 50, maxMs: 200 },
  });
  t.teardown(() => xds.stop());
  await xds.start();
  const status = () =>
    Object.fromEntries([...xds.snapshot().workloads.values()].map((w) => [w.name, w.status]));
  const picked = () => {
    const snap = xds.snapshot();
    const state = new ProxyState({
      workloads: [...snap.workloads.values()],
      services: [...snap.services.values()],
      version: 1,
    });
    const seen = new Set<string>();
    for (let i = 0; i < 60; i++) {
      const r = state.resolve('10.96.34.50', 80);
      if (r instanceof Error) throw r;
      seen.add(r.kind === 'hbone' ? r.authority.host : `plain ${r.target.host}`);
    }
    return [...seen].sort();
  };
  await until(
    () => status()['web-a'] === 'HEALTHY' && status()['web-b'] === 'HEALTHY' && status().batch === 'HEALTHY',
    'the first push',
  );
  t.deepEqual(picked(), ['10.34.3.1', '10.34.3.2']);

  // web-b fails its readiness probe; the EndpointSlice controller has not caught up (still ready).
  api.put(readyPod('web-b', '10.34.3.2', false));
  api.put(readyPod('batch', '10.34.3.9', false, 'batch'));
  await until(
    () => status()['web-b'] === 'UNHEALTHY' && status().batch === 'UNHEALTHY',
    'Ready=False pushed',
  );
  t.is(status()['web-a'], 'HEALTHY');
  t.deepEqual(picked(), ['10.34.3.1'], 'new connections to the Service go to web-a only');

  // The slice catches up (web-b not ready) while web-b is Ready again: the Pod decides, as in Istio.
  api.put(
    webSlice([
      { pod: 'web-a', ip: '10.34.3.1' },
      { pod: 'web-b', ip: '10.34.3.2', ready: false },
    ]),
  );
  api.put(readyPod('web-b', '10.34.3.2', true));
  api.put(readyPod('batch', '10.34.3.9', true, 'batch'));
  await until(() => status()['web-b'] === 'HEALTHY' && status().batch === 'HEALTHY', 'Ready=True pushed');
  t.deepEqual(picked(), ['10.34.3.1', '10.34.3.2']);

  // Terminating still takes effect from the slice: web-a, Ready but being deleted, takes no new connections.
  api.put(
    webSlice([
      { pod: 'web-a', ip: '10.34.3.1', ready: false, terminating: true },
      { pod: 'web-b', ip: '10.34.3.2' },
    ]),
  );
  await until(() => status()['web-a'] === 'UNHEALTHY', 'terminating pushed');
  t.deepEqual(picked(), ['10.34.3.2']);
});

test('two replicas: one Lease holder writes, both serve; the holder stepping down hands over', async (t) => {
  const { api, replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    pod('a', '10.34.2.1'),
  ]);
  const a = await replica('cp-a');
  const b = await replica('cp-b');
  await until(() => a.kube.elector.leading !== b.kube.elector.leading, 'exactly one leader');
  const [leader, follower] = a.kube.elector.leading ? [a, b] : [b, a];
  const lease = () =>
    (api.get('coordination.k8s.io', 'v1', 'leases', 'zmesh-system', 'zmesh-control-plane')?.spec ?? {}) as {
      holderIdentity?: string;
      leaseTransitions?: number;
    };
  t.is(lease().holderIdentity, leader === a ? 'cp-a' : 'cp-b');
  t.true(has(a.cp, 'Pod/shop/a') && has(b.cp, 'Pod/shop/a'), 'both replicas hold the config');
  await leader.kube.stop();
  await until(() => follower.kube.elector.leading, 'the follower taking over', 5000);
  t.is(lease().holderIdentity, follower === a ? 'cp-a' : 'cp-b');
  t.true((lease().leaseTransitions ?? 0) >= 1);
  // The new leader writes: a Gateway now gets its Deployment.
  api.put(gateway());
  await until(
    () => api.get('apps', 'v1', 'deployments', 'shop', 'waypoint') !== undefined,
    'the new leader writing',
  );
});

test('zmesh control-plane --kubernetes: ns l7 labels through the API; killed (SIGKILL), its Lease expires and the other replica leads', async (t) => {
  const { api, replica, kubeconfig, dir } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient' }),
    pod('a', '10.34.3.1'),
    gateway(),
  ]);
  const admin = join(dir, 'admin.sock');
  const child = execa(
    ZMESH,
    [
      'control-plane',
      '--kubernetes',
      '--kubeconfig',
      kubeconfig,
      '--no-state-dir',
      '--host',
      '127.34.0.3',
      '--port',
      '0',
      '--admin-socket',
      admin,
      '--pod-name',
      'cp-a',
      '--pod-namespace',
      'zmesh-system',
      '--lease-duration',
      '2',
    ],
    { reject: false },
  );
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  const lease = () =>
    (api.get('coordination.k8s.io', 'v1', 'leases', 'zmesh-system', 'zmesh-control-plane')?.spec ?? {}) as {
      holderIdentity?: string;
    };
  await until(() => lease().holderIdentity === 'cp-a', 'cp-a holding the Lease', 20_000);
  const on = await execa(
    ZMESH,
    ['ns', 'l7', 'on', 'shop', '--waypoint', 'waypoint', '--admin', admin, '--timeout', '1'],
    {
      reject: false,
    },
  );
  // No waypoint proxy runs here, so the rollout reports it not ACKed (exit 1); the label is set.
  t.regex(`${on.stdout}${on.stderr}`, /L7 on .*waypoint shop\/waypoint \(NOT_CONNECTED/s);
  t.is(api.get('', 'v1', 'namespaces', '', 'shop')?.metadata.labels?.['istio.io/use-waypoint'], 'waypoint');
  const b = await replica('cp-b');
  t.false(b.kube.elector.leading);
  child.kill('SIGKILL');
  await child;
  const killedAt = Date.now();
  await until(() => b.kube.elector.leading, 'cp-b taking over after the Lease expires', 10_000);
  const took = Date.now() - killedAt;
  t.log(`cp-b led ${took} ms after cp-a was killed (lease 2 s)`);
  t.true(took < 6000);
  t.is(lease().holderIdentity, 'cp-b');
});

test('a refused object in the first list keeps only itself out: the namespace labelled for its waypoint and every pod are served', async (t) => {
  const pods = Array.from({ length: 20 }, (_, i) => pod(`p${i}`, `10.34.4.${i + 1}`));
  const { replica } = await cluster(t, [
    ns('shop', { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'waypoint' }),
    gateway(),
    ...pods,
    {
      apiVersion: 'security.istio.io/v1',
      kind: 'AuthorizationPolicy',
      metadata: { name: 'bad', namespace: 'shop' },
      spec: { action: 'REJECT' },
    },
  ]);
  const { cp, kube } = await replica('cp-0');
  t.deepEqual([...kube.source.refused().keys()], ['AuthorizationPolicy/shop/bad']);
  t.true(pods.every((p) => has(cp, `Pod/shop/${p.metadata.name}`)));
  t.is(
    cp.store.view().objects.get('Namespace//shop')?.metadata.labels?.['istio.io/use-waypoint'],
    'waypoint',
  );
  t.is(cp.waypointStatus().find((w) => w.waypoint === 'shop/waypoint')?.users, 20);
});
