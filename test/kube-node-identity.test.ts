import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlPlane } from '@zmesh/control-plane';
import { KubeController } from '@zmesh/control-plane/kubernetes';
import { ApiServerDouble, type KubeObject, startXdsNode, type XdsNode } from '@zmesh/harness';
import {
  CaClient,
  CertificateAuthority,
  generateCsr,
  isZmeshError,
  ok,
  TrustBundle,
  WAYPOINT_CONFIG_TYPE_URL,
} from '@zmesh/shared';
import { WaypointXdsSource } from '@zmesh/waypoint';
import test from 'ava';

/**
 * Node identity in controller mode, against the API-server double: a ztunnel authenticates
 * with its projected ServiceAccount token (TokenRequest bound to its pod), which the control
 * plane checks with a TokenReview; the CA then signs only for pods on that ztunnel's node.
 * A waypoint (any other pod-bound token) acts for its own identity alone.
 * 127.37.0.0/16 is this file's: API .0.9, control plane .0.1, ztunnels .0.2 and .0.3.
 */
const ip = (s: string) => `127.37.${s}`;
const TRUST_DOMAIN = 'cluster.local';
const WEB = 'spiffe://cluster.local/ns/shop/sa/web';
const API = 'spiffe://cluster.local/ns/shop/sa/api';
const WAYPOINT = 'spiffe://cluster.local/ns/shop/sa/waypoint';

const meta = (name: string, namespace?: string, labels: Record<string, string> = {}) => ({
  name,
  ...(namespace ? { namespace } : {}),
  labels,
});
const pod = (namespace: string, name: string, node: string, sa: string, podIp: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: meta(name, namespace, { app: name }),
  spec: { nodeName: node, serviceAccountName: sa, containers: [{ name: 'c', image: 'i' }] },
  status: { phase: 'Running', podIP: podIp, podIPs: [{ ip: podIp }] },
});
const serviceAccount = (namespace: string, name: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'ServiceAccount',
  metadata: meta(name, namespace),
});

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

test('a ztunnel and a waypoint authenticate with their projected ServiceAccount tokens (TokenReview); the CA signs only for pods on the ztunnel node, a waypoint only its own identity', async (t) => {
  t.timeout(60_000);
  const api = new ApiServerDouble({ host: ip('0.9') });
  await api.start();
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-kube-identity-'));
  const kubeconfig = join(dir, 'kubeconfig');
  await writeFile(kubeconfig, api.kubeconfig());
  const ca = await CertificateAuthority.create({ trustDomain: TRUST_DOMAIN });
  const cp = new ControlPlane({ trustDomain: TRUST_DOMAIN, signCsr: (csr, o) => ca.signCsr(csr, o) });
  const kube = new KubeController(cp, {
    kubeconfig,
    identity: 'cp-0',
    namespace: 'zmesh-system',
    leaseSeconds: 3,
    batchMs: 5,
    waypoint: {
      image: 'localhost/zmesh:test',
      xds: 'zmesh-control-plane.zmesh-system.svc:15010',
      trustDomain: TRUST_DOMAIN,
      tokenAudience: 'zmesh',
      rootsPem: ca.rootPem,
    },
  });
  const nodes: XdsNode[] = [];
  const clients: CaClient[] = [];
  t.teardown(async () => {
    for (const n of nodes) await n.stop();
    for (const c of clients) c.close();
    await kube.stop();
    await cp.stop();
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  for (const o of [
    { apiVersion: 'v1', kind: 'Namespace', metadata: meta('zmesh-system') },
    serviceAccount('zmesh-system', 'zmesh-node'),
    pod('zmesh-system', 'ztunnel-a', 'node-a', 'zmesh-node', ip('0.2')),
    pod('zmesh-system', 'ztunnel-b', 'node-b', 'zmesh-node', ip('0.3')),
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: meta('shop', undefined, { 'istio.io/dataplane-mode': 'ambient' }),
    },
    serviceAccount('shop', 'web'),
    serviceAccount('shop', 'api'),
    pod('shop', 'web', 'node-a', 'web', ip('2.1')),
    pod('shop', 'api', 'node-b', 'api', ip('2.2')),
    // A waypoint: its Gateway, and a pod of its Deployment on node-a with its own ServiceAccount.
    serviceAccount('shop', 'waypoint'),
    {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      metadata: meta('waypoint', 'shop'),
      spec: {
        gatewayClassName: 'zmesh-waypoint',
        listeners: [{ name: 'mesh', port: 15008, protocol: 'HBONE' }],
      },
    },
    {
      ...pod('shop', 'waypoint-0', 'node-a', 'waypoint', ip('3.1')),
      metadata: meta('waypoint-0', 'shop', { 'gateway.networking.k8s.io/gateway-name': 'waypoint' }),
    },
  ] as KubeObject[])
    api.put(o);
  await kube.start();
  const port = await cp.start(0, ip('0.1'));
  const address = `${ip('0.1')}:${port}`;
  /** What the kubelet mounts for a pod: a token bound to it, for `audience`. */
  const projected = (namespace: string, sa: string, podName: string, audience = 'zmesh') =>
    api.requestToken(namespace, sa, {
      audiences: [audience],
      expirationSeconds: 3600,
      boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: podName },
    }).token;
  const tokenA = projected('zmesh-system', 'zmesh-node', 'ztunnel-a');

  // The ztunnel of node-a: xDS and its workloads' certificates with the ServiceAccount token alone.
  const nodeA = await startXdsNode({
    node: 'node-a',
    address: ip('0.2'),
    xds: address,
    token: tokenA,
    rootsPem: [ca.rootPem],
    certTtlSeconds: 3600,
  });
  nodes.push(nodeA);
  await until(
    'node-a to sync and hold web certificate',
    () => nodeA.source.synced && nodeA.z.certs.get(WEB) !== undefined,
  );
  const row = cp.proxyStatus().find((r) => r.connected);
  t.is(row?.node, 'node-a', 'the node comes from the token (the pod it is bound to), not from a claim');
  t.true(
    api.requests.some((r) => r.method === 'POST' && r.path === '/apis/authentication.k8s.io/v1/tokenreviews'),
    'checked with a TokenReview',
  );

  const metric = async (reason: string) => {
    const text = await cp.metrics.registry.metrics();
    return Number(
      new RegExp(`^zmesh_cp_csr_refusals_total\\{reason="${reason}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0,
    );
  };
  const bundle = new TrustBundle(TRUST_DOMAIN, [ca.rootPem]);
  const ask = async (token: string, identity: string) => {
    const client = new CaClient({ address, token: () => token, bundle });
    clients.push(client);
    return client.sign((await generateCsr(identity)).csrPem, identity, 3600);
  };

  // The node authorizer: node-a's ztunnel asking for a pod of node-b is refused, with a code and a metric.
  const wrongNode = await t.throwsAsync(ask(tokenA, API));
  t.true(isZmeshError(wrongNode, 'ZM_ERR_CA_REFUSED'), String(wrongNode?.message));
  t.regex(
    wrongNode!.message,
    /PERMISSION_DENIED: .*shop\/sa\/api is not the identity of a workload scheduled on node node-a/,
  );
  t.is(await metric('not-on-node'), 1);
  t.true((await ask(tokenA, WEB)).length > 0, 'its own node pod is signed');
  // node-b's ztunnel token gets node-b's pod, and not node-a's.
  const tokenB = projected('zmesh-system', 'zmesh-node', 'ztunnel-b');
  t.true((await ask(tokenB, API)).length > 0);
  await t.throwsAsync(ask(tokenB, WEB), {
    message: /not the identity of a workload scheduled on node node-b/,
  });
  t.is(await metric('not-on-node'), 2);

  // A workload's own pod-bound token acts for itself alone: its own identity, nobody else's.
  const webToken = projected('shop', 'web', 'web');
  t.true((await ask(webToken, WEB)).length > 0, 'a workload gets its own identity');
  await t.throwsAsync(ask(webToken, API), { message: /shop\/sa\/api is not the caller's own identity/ });
  const webOnNodeA = await t.throwsAsync(ask(webToken, WAYPOINT));
  t.regex(webOnNodeA!.message, /is not the caller's own identity/, 'not even a pod of its own node');
  t.is(await metric('not-own-identity'), 2);

  // Authentication: another audience, a token bound to no pod, a token nobody issued.
  const refusals: Array<[string, RegExp]> = [
    [
      projected('zmesh-system', 'zmesh-node', 'ztunnel-a', 'other'),
      /token review: .*token audiences \["other"\] is invalid/,
    ],
    [
      api.requestToken('shop', 'web', { audiences: ['zmesh'] }).token,
      /token review: shop\/web is not a node proxy ServiceAccount \(zmesh-system\/zmesh-node\) nor bound to a pod/,
    ],
    ['double.not-issued-by-the-api-server', /token review: .*not one this server issued/],
  ];
  for (const [token, reason] of refusals) {
    const e = await t.throwsAsync(ask(token, WEB));
    t.true(isZmeshError(e, 'ZM_ERR_CA_REFUSED'), String(e?.message));
    t.regex(e!.message, /UNAUTHENTICATED/);
    t.regex(e!.message, reason);
  }
  t.is(await metric('unauthenticated'), refusals.length);

  // The same on xDS: a stream with a refused token gets nothing, and proxy-status says why.
  const impostor = await startXdsNode({
    node: 'node-b',
    address: ip('0.3'),
    xds: address,
    token: api.requestToken('shop', 'api', { audiences: ['zmesh'] }).token,
    rootsPem: [ca.rootPem],
    certTtlSeconds: 3600,
  });
  nodes.push(impostor);
  await until('proxy-status to list the refused stream', () =>
    cp
      .proxyStatus()
      .some((r) => r.refused?.reason.startsWith('token review: shop/api is not a node proxy') === true),
  );
  t.is(impostor.z.localWorkloads().length, 0, 'it received nothing');

  // The waypoint authenticates with its own token: its certificate and its own config, nothing else.
  const waypointToken = projected('shop', 'waypoint', 'waypoint-0');
  t.true((await ask(waypointToken, WAYPOINT)).length > 0, "the waypoint's own certificate");
  await t.throwsAsync(ask(waypointToken, WEB), { message: /is not the caller's own identity/ });
  const subscribe = (id: string, token: string, got: unknown[]) => {
    const source = new WaypointXdsSource({
      address,
      resourceName: 'shop/waypoint',
      node: { id, metadata: { NODE_NAME: 'node-a' } },
      token,
      backoff: { initialMs: 50, maxMs: 200 },
      apply: (doc) => {
        got.push(doc);
        return ok(doc as never);
      },
    });
    source.start();
    t.teardown(() => source.stop());
  };
  const applied: unknown[] = [];
  subscribe('waypoint~shop~waypoint-0', waypointToken, applied);
  await until('the waypoint config to arrive', () => applied.length > 0);
  t.like(applied[0], { waypoint: { name: 'waypoint', namespace: 'shop', serviceAccount: 'waypoint' } });
  const waypointRow = cp.proxyStatus().find((r) => r.proxy === 'waypoint~shop~waypoint-0');
  t.is(waypointRow?.node, 'node-a');
  t.truthy(waypointRow?.types[WAYPOINT_CONFIG_TYPE_URL], 'subscribed to its config');
  // Another workload's own token, on the same node, reads no waypoint config.
  const nosy: unknown[] = [];
  subscribe('waypoint~shop~nosy', webToken, nosy);
  await until('the nosy stream to connect', () =>
    cp.proxyStatus().some((r) => r.proxy === 'waypoint~shop~nosy' && r.connected),
  );
  await new Promise((r) => setTimeout(r, 300));
  t.is(nosy.length, 0, 'nothing served to a token that is not the waypoint');

  // A token bound to a pod that is gone is refused once the cached review expires (a fresh token here).
  const stale = projected('zmesh-system', 'zmesh-node', 'ztunnel-b');
  api.remove(pod('zmesh-system', 'ztunnel-b', 'node-b', 'zmesh-node', ip('0.3')));
  await t.throwsAsync(ask(stale, API), {
    message: /token review: .*ztunnel-b the token is bound to is gone/,
  });
});
