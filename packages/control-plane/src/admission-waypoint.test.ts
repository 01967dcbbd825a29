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
metadata: { name: web, namespace: shop }
spec: { clusterIP: 10.96.0.20, selector: { app: web }, ports: [{ name: http, port: 80, targetPort: 8080 }] }
`;

const CUSTOM = `kind: AuthorizationPolicy
metadata: { name: ext-authz, namespace: shop }
spec:
  targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]
  action: CUSTOM
  rules: [{ to: [{ operation: { paths: ["/admin*"] } }] }]
`;

const BAD_ROUTE = `kind: HTTPRoute
metadata: { name: split, namespace: shop }
spec:
  parentRefs: [{ kind: Service, name: web }]
  rules:
    - backendRefs: [{ name: web, port: 80, weight: -5 }]
`;

const route = (rules: string) => `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: grpc, namespace: shop }
spec:
  parentRefs: [{ group: "", kind: Service, name: web, port: 80 }]
  rules:
${rules}`;

const GOOD = route(`    - matches: [{ method: { service: pkg.Echo, method: Echo } }]
      backendRefs: [{ name: web-v2, port: 80 }]
    - backendRefs: [{ name: web, port: 80 }]
`);

/** A second Service for GRPCRoute backends. */
const WEB_V2 = `kind: Service
metadata: { name: web-v2, namespace: shop }
spec: { clusterIP: 10.96.0.21, ports: [{ name: http, port: 80, targetPort: 8080 }] }
`;

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

test('with the waypoint decoder wired, apply refuses what the waypoint would NACK, on the object at fault', (t) => {
  const cp = controlPlane(t);
  t.true(cp.store.applyYaml(SHOP, 'shop.yaml').ok);
  const custom = cp.store.applyYaml(CUSTOM, 'custom.yaml');
  t.false(custom.ok);
  const reasons = custom.ok ? [] : custom.error;
  t.log(reasons);
  t.true(reasons.length > 0);
  t.true(
    reasons.every((r) => r.startsWith('custom.yaml#0 (AuthorizationPolicy shop/ext-authz): spec.action')),
    reasons.join('\n'),
  );
  const route = cp.store.applyYaml(BAD_ROUTE, 'route.yaml');
  const routeReasons = route.ok ? [] : route.error;
  t.log(routeReasons);
  t.true(routeReasons.length > 0);
  t.true(
    routeReasons.every((r) => r.startsWith('route.yaml#0 (HTTPRoute shop/split): spec.rules[0]')),
    routeReasons.join('\n'),
  );
  t.is(cp.store.view().objects.size, 4, 'nothing of either was stored');
});

test('without the decoder (the library default) a bad route passes admission and the waypoint NACKs it', (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  t.teardown(() => cp.stop());
  t.true(cp.store.applyYaml(SHOP).ok);
  t.true(cp.store.applyYaml(BAD_ROUTE).ok);
  // A waypoint policy is checked by convertAuthorizationPolicy, which runs the waypoint's own
  // policy reader (shared/authz/l7-policy.ts): refused with or without the decoder.
  const custom = cp.store.applyYaml(CUSTOM);
  t.deepEqual(custom.ok ? [] : custom.error, [
    'apply#0 (AuthorizationPolicy shop/ext-authz): spec.action: CUSTOM (external authorization) is not supported by the zmesh waypoint',
  ]);
});

test('HTTPRoute filters: apply admits what the waypoint serves and refuses what Gateway API forbids, with the path', (t) => {
  const cp = controlPlane(t);
  t.true(cp.store.applyYaml(SHOP, 'shop.yaml').ok);
  const good = `kind: HTTPRoute
metadata: { name: filtered, namespace: shop }
spec:
  parentRefs: [{ kind: Service, name: web }]
  rules:
    - matches: [{ path: { type: PathPrefix, value: /api }, queryParams: [{ name: v, value: "2" }] }]
      filters:
        - { type: RequestHeaderModifier, requestHeaderModifier: { add: [{ name: x-api, value: v2 }] } }
        - { type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /v2 } } }
        - { type: RequestMirror, requestMirror: { backendRef: { name: web, port: 80 }, percent: 5 } }
      backendRefs: [{ name: web, port: 80 }]
      timeouts: { request: 2s, backendRequest: 1s }
    - matches: [{ path: { type: Exact, value: /old } }]
      filters: [{ type: RequestRedirect, requestRedirect: { path: { type: ReplaceFullPath, replaceFullPath: /new }, statusCode: 301 } }]
`;
  const ok = cp.store.applyYaml(good, 'good.yaml');
  t.true(ok.ok, ok.ok ? '' : ok.error.join('\n'));
  const bad = good
    .replace('name: filtered', 'name: bad')
    .replace('type: Exact, value: /old', 'type: Exact, value: /old2')
    .replace('statusCode: 301', 'statusCode: 305');
  const r = cp.store.applyYaml(bad, 'bad.yaml');
  t.deepEqual(r.ok ? [] : r.error, [
    'bad.yaml#0 (HTTPRoute shop/bad): spec.rules[1].filters[0].requestRedirect.statusCode: must be one of 301, 302, 303, 307, 308 (as waypoint shop/waypoint reads it)',
  ]);
});

test('RequestMirror percent and fraction: apply admits each alone and refuses both, a zero denominator and a fraction over 1', (t) => {
  const cp = controlPlane(t);
  t.true(cp.store.applyYaml(SHOP, 'shop.yaml').ok);
  const route = (name: string, mirror: string) => `kind: HTTPRoute
metadata: { name: ${name}, namespace: shop }
spec:
  parentRefs: [{ kind: Service, name: web }]
  rules:
    - filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: web, port: 80 }${mirror} } }]
      backendRefs: [{ name: web, port: 80 }]
`;
  for (const [name, mirror] of [
    ['p0', ', percent: 0'],
    ['p100', ', percent: 100'],
    ['f', ', fraction: { numerator: 25, denominator: 50 }'],
    ['f-default', ', fraction: { numerator: 5 }'],
    ['f-all', ', fraction: { numerator: 7, denominator: 7 }'],
  ] as const) {
    const r = cp.store.applyYaml(route(name, mirror), `${name}.yaml`);
    t.true(r.ok, `${name}: ${r.ok ? '' : r.error.join('\n')}`);
  }
  for (const [name, mirror, want] of [
    ['both', ', percent: 5, fraction: { numerator: 1 }', /requestMirror: percent and fraction are exclusive/],
    ['zero', ', fraction: { numerator: 0, denominator: 0 }', /fraction\.denominator/],
    ['over', ', fraction: { numerator: 3, denominator: 2 }', /numerator may not exceed denominator/],
    ['p101', ', percent: 101', /percent/],
    ['neg', ', percent: -1', /percent/],
    ['no-num', ', fraction: { denominator: 10 }', /fraction\.numerator/],
  ] as const) {
    const r = cp.store.applyYaml(route(name, mirror), `${name}.yaml`);
    t.false(r.ok, `${name} admitted`);
    if (!r.ok) t.regex(r.error.join('\n'), want, name);
  }
});

test('an HTTPRoute reaches its waypoint with its creationTimestamp, which breaks precedence ties there', (t) => {
  const cp = controlPlane(t);
  t.true(cp.store.applyYaml(SHOP, 'shop.yaml').ok);
  const applied = cp.store.applyYaml(
    `kind: HTTPRoute
metadata: { name: dated, namespace: shop }
spec:
  parentRefs: [{ kind: Service, name: web }]
  rules: [{ backendRefs: [{ name: web, port: 80 }] }]
`,
    'dated.yaml',
  );
  t.true(applied.ok, applied.ok ? '' : applied.error.join('\n'));
  const wp = compile(cp.store.view(), { trustDomain: 'cluster.local' }).waypoints?.find(
    (w) => w.name === 'shop/waypoint',
  );
  const route = (wp?.config.httpRoutes as Array<{ name: string; creationTimestamp?: string }>)?.find(
    (r) => r.name === 'dated',
  );
  t.regex(route?.creationTimestamp ?? '', /^\d{4}-\d\d-\d\dT/);
  const decoded = decodeWaypointConfig(wp?.config, 'wp');
  if (!decoded.ok) return t.fail(decoded.error.join('\n'));
  t.is(
    decoded.value.routes.find((r) => r.name === 'dated')?.createdAt,
    Date.parse(route!.creationTimestamp!),
  );
});

test('a GRPCRoute on a Service compiles into its waypoint config, with its backends', (t) => {
  const cp = controlPlane(t);
  const applied = cp.store.applyYaml(`${SHOP}---\n${WEB_V2}---\n${GOOD}`, 'shop.yaml');
  t.deepEqual(applied.ok ? [] : applied.error, []);
  const wp = compile(cp.store.view(), { trustDomain: 'cluster.local' }).waypoints?.find(
    (w) => w.name === 'shop/waypoint',
  );
  t.like(wp?.config, {
    grpcRoutes: [{ name: 'grpc', namespace: 'shop', parentRefs: [{ kind: 'Service', name: 'web' }] }],
  });
  const services = ((wp?.config.services ?? []) as Array<{ name: string }>).map((s) => s.name).sort();
  t.deepEqual(services, ['web', 'web-v2'], 'the backend the route names is served too');
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
  t.true(cp.store.applyYaml(`${SHOP}---\n${WEB_V2}`, 'shop.yaml').ok);
  const schema = cp.store.applyYaml(
    route(`    - backendRefs: [{ name: web, port: 80, weight: -5 }]
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
      `    - matches: [{ method: { type: Exact } }]\n      backendRefs: [{ name: web, port: 80 }]\n`,
      /spec\.rules\[0\]\.matches\[0\]\.method: one or both of service or method must be specified/,
    ],
    [
      `    - matches: [{ method: { service: "not a service", method: Echo } }]\n      backendRefs: [{ name: web, port: 80 }]\n`,
      /spec\.rules\[0\]\.matches\[0\]\.method\.service: must be a service name/,
    ],
    [
      `    - matches: [{ method: { type: RegularExpression, method: "Echo(" } }]\n      backendRefs: [{ name: web, port: 80 }]\n`,
      /spec\.rules\[0\]\.matches\[0\]\.method\.method: invalid regex/,
    ],
    [
      `    - backendRefs: [{ name: nowhere, port: 80 }]\n`,
      /spec\.rules\[0\]\.backendRefs\[0\]: BackendNotFound: no Service shop\/nowhere/,
    ],
  ];
  for (const [rules, want] of cases) {
    const r = cp.store.applyYaml(route(rules), 'bad.yaml');
    const reasons = r.ok ? [] : r.error;
    t.log(reasons);
    t.true(
      reasons.some((x) => x.startsWith('bad.yaml#0 (GRPCRoute shop/grpc): ') && want.test(x)),
      `${want}: ${reasons.join('\n')}`,
    );
  }
  t.is(cp.store.view().objects.size, 5, 'none of the GRPCRoutes was stored');
});
