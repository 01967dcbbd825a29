import { decodeWaypointConfig } from '@zmesh/waypoint';
import test from 'ava';
import { compile } from './compiler.js';
import { ControlPlane } from './control-plane.js';

const SHOP = `kind: Namespace
metadata: { name: shop, labels: { istio.io/dataplane-mode: ambient, istio.io/use-waypoint: waypoint } }
---
kind: Gateway
metadata: { name: waypoint, namespace: shop }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 10.3.0.1 }] }
---
kind: Pod
metadata: { name: waypoint, namespace: shop, labels: { gateway.networking.k8s.io/gateway-name: waypoint } }
spec: { serviceAccountName: waypoint, nodeName: node-w }
status: { podIP: 10.3.0.1 }
---
kind: Service
metadata: { name: echo, namespace: shop }
spec: { clusterIP: 10.96.0.20, ports: [{ name: grpc, port: 7070, targetPort: 7070 }] }
---
kind: Service
metadata: { name: echo-v2, namespace: shop }
spec: { clusterIP: 10.96.0.21, ports: [{ name: grpc, port: 7070, targetPort: 7070 }] }
`;

const route = (rules: string) => `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: echo, namespace: shop }
spec:
  parentRefs: [{ group: "", kind: Service, name: echo, port: 7070 }]
  rules:
${rules}`;

const GOOD = route(`    - matches: [{ method: { service: pkg.Echo, method: Echo } }]
      backendRefs: [{ name: echo-v2, port: 7070 }]
    - backendRefs: [{ name: echo, port: 7070 }]
`);

function controlPlane(t: { teardown(f: () => Promise<void>): void }): ControlPlane {
  const cp = new ControlPlane({
    trustDomain: 'cluster.local',
    validateWaypointConfig: (config) => {
      const decoded = decodeWaypointConfig(config, 'waypoint');
      return decoded.ok ? [] : decoded.error.map((r) => r.replace(/^waypoint: /, ''));
    },
  });
  t.teardown(() => cp.stop());
  return cp;
}

test('a GRPCRoute on a Service compiles into its waypoint config, with its backends', (t) => {
  const cp = controlPlane(t);
  const applied = cp.store.applyYaml(`${SHOP}---\n${GOOD}`, 'shop.yaml');
  t.deepEqual(applied.ok ? [] : applied.error, []);
  const wp = compile(cp.store.view(), { trustDomain: 'cluster.local' }).waypoints?.find(
    (w) => w.name === 'shop/waypoint',
  );
  t.like(wp?.config, {
    grpcRoutes: [{ name: 'echo', namespace: 'shop', parentRefs: [{ kind: 'Service', name: 'echo' }] }],
  });
  const services = ((wp?.config.services ?? []) as Array<{ name: string }>).map((s) => s.name).sort();
  t.deepEqual(services, ['echo', 'echo-v2'], 'the backend the route names is served too');
  const decoded = decodeWaypointConfig(wp?.config, 'wp');
  t.true(decoded.ok);
  if (decoded.ok)
    t.deepEqual(decoded.value.grpcRoutes[0]?.rules[0]?.matches[0]?.path, {
      type: 'Exact',
      value: '/pkg.Echo/Echo',
    });
});

test('apply refuses a GRPCRoute the schema refuses (kubernetes-models) and one the waypoint refuses, on the route', (t) => {
  const cp = controlPlane(t);
  t.true(cp.store.applyYaml(SHOP, 'shop.yaml').ok);
  const schema = cp.store.applyYaml(
    route(`    - backendRefs: [{ name: echo, port: 7070, weight: -5 }]
      filters: [{ type: URLRewrite }]
`),
    'bad.yaml',
  );
  const schemaReasons = schema.ok ? [] : schema.error;
  t.log(schemaReasons);
  t.true(schemaReasons.length > 0);
  t.true(
    schemaReasons.every((r) =>
      /^bad\.yaml#0 .*spec\.rules\[0\]\.(backendRefs\[0\]\.weight|filters\[0\]\.type): /.test(r),
    ),
    schemaReasons.join('\n'),
  );
  const cases: Array<[string, RegExp]> = [
    [
      `    - matches: [{ method: { type: Exact } }]\n      backendRefs: [{ name: echo, port: 7070 }]\n`,
      /spec\.rules\[0\]\.matches\[0\]\.method: one or both of service or method must be specified/,
    ],
    [
      `    - matches: [{ method: { service: "not a service", method: Echo } }]\n      backendRefs: [{ name: echo, port: 7070 }]\n`,
      /spec\.rules\[0\]\.matches\[0\]\.method\.service: must be a service name/,
    ],
    [
      `    - matches: [{ method: { type: RegularExpression, method: "Echo(" } }]\n      backendRefs: [{ name: echo, port: 7070 }]\n`,
      /spec\.rules\[0\]\.matches\[0\]\.method\.method: invalid regex/,
    ],
    [
      `    - backendRefs: [{ name: nowhere, port: 7070 }]\n`,
      /spec\.rules\[0\]\.backendRefs\[0\]: no service shop\/nowhere/,
    ],
  ];
  for (const [rules, want] of cases) {
    const r = cp.store.applyYaml(route(rules), 'bad.yaml');
    const reasons = r.ok ? [] : r.error;
    t.log(reasons);
    t.true(
      reasons.some((x) => x.startsWith('bad.yaml#0 (GRPCRoute shop/echo): ') && want.test(x)),
      `${want}: ${reasons.join('\n')}`,
    );
  }
  t.is(cp.store.view().objects.size, 5, 'none of them was stored');
});
