import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlPlane } from '@zmesh/control-plane';
import { KubeController } from '@zmesh/control-plane/kubernetes';
import { ApiServerDouble, type KubeObject } from '@zmesh/harness';
import { CaClient, CertificateAuthority, generateCsr, isZmeshError, TrustBundle } from '@zmesh/shared';
import test from 'ava';
import { startXdsNode, type XdsNode } from './helpers/mesh.js';

/**
 * Node identity in controller mode, against the API-server double: a ztunnel authenticates
 * with its projected ServiceAccount token (TokenRequest bound to its pod), which the control
 * plane checks with a TokenReview; the CA then signs only for pods on that ztunnel's node.
 * 127.37.0.0/16 is this file's: API .0.9, control plane .0.1, ztunnels .0.2 and .0.3.
 */
const ip = (s: string) => `127.37.${s}`;
const TRUST_DOMAIN = 'cluster.local';
const WEB = 'spiffe://cluster.local/ns/shop/sa/web';
const API = 'spiffe://cluster.local/ns/shop/sa/api';

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

test('a ztunnel authenticates with its projected ServiceAccount token (TokenReview); the CA signs only for pods on its node', async (t) => {
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

  // Authentication: another audience, a workload's own ServiceAccount, a token nobody issued.
  const refusals: Array<[string, RegExp]> = [
    [
      projected('zmesh-system', 'zmesh-node', 'ztunnel-a', 'other'),
      /token review: .*token audiences \["other"\] is invalid/,
    ],
    [
      projected('shop', 'web', 'web'),
      /token review: shop\/web is not a node proxy ServiceAccount \(zmesh-system\/zmesh-node\)/,
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
    token: projected('shop', 'api', 'api'),
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

  // A token bound to a pod that is gone is refused once the cached review expires (a fresh token here).
  const stale = projected('zmesh-system', 'zmesh-node', 'ztunnel-b');
  api.remove(pod('zmesh-system', 'ztunnel-b', 'node-b', 'zmesh-node', ip('0.3')));
  await t.throwsAsync(ask(stale, API), {
    message: /token review: .*ztunnel-b the token is bound to is gone/,
  });
});
