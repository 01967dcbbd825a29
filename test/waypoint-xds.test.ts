import { once } from 'node:events';
import { unlink, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { ControlPlane } from '@zmesh/control-plane';
import { L7_POLICY_YAML, L7_ROUTE_YAML, type L7Lab, startL7Lab } from '@zmesh/harness';
import { adminRequest, WAYPOINT_CONFIG_TYPE_URL } from '@zmesh/shared';
import { decodeWaypointConfig, WaypointXdsSource } from '@zmesh/waypoint';
import test from 'ava';

/** 127.74.0.0/16 and ports 25910/25914 are this file's. */
const LAB = { block: '127.74', xdsPort: 25_910, l7Config: false };
const SPLIT_REQUESTS = 100;
const WAYPOINT_ID = 'waypoint~127.74.3.9~shop.waypoint~svc.cluster.local';

const GRPC_ROUTE_YAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: web-grpc, namespace: shop }
spec:
  parentRefs: [{ group: "", kind: Service, name: web, port: 80 }]
  rules:
    - matches: [{ method: { service: shop.Web, method: Get } }]
      backendRefs: [{ name: web-v2, port: 80 }]
`;

/** One request through the frontend's forward listener: `<status> <body's first word>`. */
function call(lab: L7Lab, method: string, path: string): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ ...lab.entry, method, path, agent: false }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += d.toString();
      });
      res.on('end', () => resolve(`${res.statusCode} ${body.split(' ')[0]}`));
    });
    req.on('error', (e) => resolve(`000 ${e.message}`));
    req.setTimeout(3_000, () => req.destroy(new Error('timeout')));
    req.end();
  });
}

async function until(what: () => Promise<boolean>, timeoutMs = 8_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await what()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

test('the waypoint takes its policy and routes from the control plane over xDS, live', async (t) => {
  t.timeout(45_000);
  const lab = await startL7Lab(LAB);
  t.teardown(() => lab.stop());
  t.regex(await lab.l7(true), /L7 on .*acked by 3 proxies/);
  const [status] = (await adminRequest(lab.admin, '/waypoint-status')).json<
    Array<{ waypoint: string; users: number; ready: boolean; ackedBy: string[] }>
  >();
  t.like(status, { waypoint: 'shop/waypoint', ready: true });
  t.true((status?.users ?? 0) > 0 && status?.ackedBy.length === 1, JSON.stringify(status));
  t.regex((await adminRequest(lab.admin, '/metrics')).text, /^zmesh_cp_waypoints_not_ready 0$/m);
  t.is((await call(lab, 'POST', '/admin')).split(' ')[0], '200', 'no policy yet');

  // A DENY policy targeting the waypoint Gateway, as a file in the watched config directory.
  const policyFile = join(lab.configDir, 'policy.yaml');
  await writeFile(policyFile, L7_POLICY_YAML);
  t.true(await until(async () => (await call(lab, 'POST', '/admin')).startsWith('403')), 'DENY applies');
  t.true((await call(lab, 'GET', '/public')).startsWith('200'));

  // The 90/10 HTTPRoute through the admin API (ConfigStore apply).
  const applied = await adminRequest(lab.admin, '/apply', { method: 'POST', body: L7_ROUTE_YAML });
  t.is(applied.status, 200, applied.text);
  t.true(
    await until(async () => {
      const status = (await adminRequest(lab.admin, '/proxy-status')).json<
        Array<{ proxy: string; types: Record<string, { state: string }> }>
      >();
      const wp = status.find((p) => p.proxy.startsWith('waypoint~'));
      return wp?.types['type.googleapis.com/zmesh.waypoint.WaypointConfig']?.state === 'SYNCED';
    }),
  );
  const counts = { v1: 0, v2: 0 };
  for (let i = 0; i < SPLIT_REQUESTS; i++) {
    const r = await call(lab, 'GET', '/public');
    if (r === '200 v1') counts.v1++;
    else if (r === '200 v2') counts.v2++;
  }
  t.log(`${SPLIT_REQUESTS} × GET /public: v1 ${counts.v1}, v2 ${counts.v2}`);
  t.is(counts.v1 + counts.v2, SPLIT_REQUESTS);
  // 90/10 of 100: v2 is Binomial(100, 0.1), mean 10, sd 3; 1..25 fails ~1e-6 of the time.
  t.true(counts.v2 >= 1 && counts.v2 <= 25, `v2 got ${counts.v2}`);

  // A GRPCRoute on the same Service reaches the waypoint the same way; its method match is
  // a path match, so a plain POST to /shop.Web/Get shows which rule served it.
  const grpcRoute = await adminRequest(lab.admin, '/apply', { method: 'POST', body: GRPC_ROUTE_YAML });
  t.is(grpcRoute.status, 200, grpcRoute.text);
  t.true(
    await until(async () => (await call(lab, 'POST', '/shop.Web/Get')) === '200 v2'),
    'the GRPCRoute method match sends /shop.Web/Get to web-v2',
  );
  for (let i = 0; i < 10; i++) t.is(await call(lab, 'POST', '/shop.Web/Get'), '200 v2');

  await unlink(policyFile);
  t.true(await until(async () => (await call(lab, 'POST', '/admin')).startsWith('200')), 'policy removed');

  // The ready waypoint goes away (killed): its users stay bound and fail closed, never bypassed.
  const pid = lab.waypointPid();
  if (pid === undefined) return t.fail('no waypoint pid');
  process.kill(pid, 'SIGKILL');
  const waypoint = async () =>
    (await adminRequest(lab.admin, '/waypoint-status'))
      .json<Array<{ waypoint: string; users: number; held: number; ready: boolean }>>()
      .find((w) => w.waypoint === 'shop/waypoint');
  t.true(await until(async () => (await waypoint())?.ready === false), 'the control plane sees it gone');
  // A change while it is gone recompiles: still bound.
  const reapplied = await adminRequest(lab.admin, '/apply', { method: 'POST', body: L7_POLICY_YAML });
  t.is(reapplied.status, 200, reapplied.text);
  t.like(await waypoint(), { held: 0 });
  t.true(((await waypoint())?.users ?? 0) > 0, 'its users stay bound to it');
  for (let i = 0; i < 5; i++) {
    const r = await call(lab, 'GET', '/public');
    t.false(r.startsWith('200'), `refused, not sent around the waypoint: ${r}`);
    if (i === 0) t.log(`with the waypoint gone: ${r}`);
  }
});

test('a waypoint config the waypoint cannot enforce is NACKed with its reasons; the last good one stays', async (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const port = await cp.start(0, '127.74.0.9');
  const source = new WaypointXdsSource({
    address: `127.74.0.9:${port}`,
    resourceName: 'shop/waypoint',
    node: { id: WAYPOINT_ID },
    token: cp.issueNodeToken('node-w'),
    apply: (doc, from) => decodeWaypointConfig(doc, from),
  });
  t.teardown(async () => {
    source.stop();
    await cp.stop();
  });
  const gateway = `kind: Namespace
metadata: { name: shop, labels: { istio.io/use-waypoint: waypoint } }
---
kind: Service
metadata: { name: web, namespace: shop }
spec: { clusterIP: 10.96.74.20, ports: [{ name: http, port: 80, targetPort: 8080 }] }
---
kind: Gateway
metadata: { name: waypoint, namespace: shop }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 127.74.3.9 }] }
---
kind: Pod
metadata: { name: waypoint, namespace: shop, labels: { gateway.networking.k8s.io/gateway-name: waypoint } }
spec: { serviceAccountName: waypoint, nodeName: node-w }
status: { podIP: 127.74.3.9 }
`;
  const first = once(source, 'applied');
  source.start();
  t.true(cp.store.applyYaml(gateway).ok);
  await first;
  const good = source.version;
  // A control plane without the waypoint's decoder wired into admission (the library
  // default) serves a route the waypoint cannot take: refused, never half-applied.
  // (A waypoint policy it cannot enforce, say CUSTOM, is refused at apply already.)
  t.false(cp.store.applyYaml(L7_POLICY_YAML.replace('DENY', 'CUSTOM')).ok);
  const nack = once(source, 'nack');
  t.true(
    cp.store.applyYaml(`kind: HTTPRoute
metadata: { name: split, namespace: shop }
spec:
  parentRefs: [{ kind: Service, name: web }]
  rules: [{ backendRefs: [{ name: web, port: 80, weight: -5 }] }]
`).ok,
  );
  const [reasons] = (await nack) as [string[]];
  t.regex(reasons.join('; '), /^shop\/waypoint: .*weight/);
  t.is(source.version, good);
  const typeOf = (proxy: string) =>
    cp.proxyStatus().find((p) => p.proxy === proxy)?.types[WAYPOINT_CONFIG_TYPE_URL];
  await until(async () => typeOf(WAYPOINT_ID)?.state === 'NACKED');
  t.is(typeOf(WAYPOINT_ID)?.state, 'NACKED');

  // Another node's token subscribes to the same name: answered (and ACKed) without it.
  const intruder = new WaypointXdsSource({
    address: `127.74.0.9:${port}`,
    resourceName: 'shop/waypoint',
    node: { id: 'intruder' },
    token: cp.issueNodeToken('node-x'),
    apply: () => t.fail('another node must not receive the waypoint config') as never,
  });
  t.teardown(() => intruder.stop());
  intruder.start();
  t.true(await until(async () => typeOf('intruder')?.acked != null));
});
