import test from 'ava';
import { compile } from './compiler.js';
import { ConfigStore } from './config-store.js';
import { NAMESPACE_YAML, podYaml, SERVICE_YAML } from './testing/fixtures.js';

const GATEWAY = `kind: Gateway
metadata: { name: wp, namespace: ns1 }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 10.1.0.9 }] }
`;
const WAYPOINT_POD = podYaml('wp-pod', '10.1.0.9', 'node-w', {
  'gateway.networking.k8s.io/gateway-name': 'wp',
});
const ROUTE = `kind: HTTPRoute
metadata: { name: r, namespace: ns1 }
spec:
  parentRefs: [{ kind: Service, name: svc, port: 80 }, { kind: Service, name: other }]
  rules: [{ backendRefs: [{ name: svc, port: 80 }] }]
`;
const POLICY = `kind: AuthorizationPolicy
metadata: { name: deny, namespace: ns1 }
spec:
  targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: wp }]
  action: DENY
  rules: [{ to: [{ operation: { methods: [POST] } }] }]
`;

function waypoints(...docs: string[]) {
  const store = new ConfigStore();
  const applied = store.applyYaml(docs.join('---\n'));
  if (!applied.ok) throw new Error(applied.error.join('\n'));
  return compile(store.view(), { trustDomain: 'example.org' }).waypoints ?? [];
}

test('a waypoint Gateway compiles to its config: services using it, endpoints, routes, policies', (t) => {
  const labelled = NAMESPACE_YAML.replace('ambient\n', 'ambient\n    istio.io/use-waypoint: wp\n');
  const [wp] = waypoints(
    labelled,
    podYaml('a', '10.1.0.1'),
    SERVICE_YAML,
    GATEWAY,
    WAYPOINT_POD,
    ROUTE,
    POLICY,
  );
  t.is(wp?.name, 'ns1/wp');
  t.like(wp?.config, {
    waypoint: { name: 'wp', namespace: 'ns1', trustDomain: 'example.org', serviceAccount: 'sa-wp-pod' },
    services: [{ name: 'svc', namespace: 'ns1', addresses: ['10.96.0.10'] }],
    workloads: [{ uid: 'Kubernetes//Pod/ns1/a', addresses: ['10.1.0.1'] }],
    httpRoutes: [{ name: 'r', namespace: 'ns1', parentRefs: [{ kind: 'Service', name: 'svc', port: 80 }] }],
    authorizationPolicies: [{ name: 'deny', action: 'DENY' }],
  });
  t.is((wp?.config.httpRoutes as unknown[] | undefined)?.length, 1);
});

test('without istio.io/use-waypoint the waypoint serves nothing, and routes do not attach', (t) => {
  const [wp] = waypoints(NAMESPACE_YAML, podYaml('a', '10.1.0.1'), SERVICE_YAML, GATEWAY, ROUTE, POLICY);
  t.like(wp?.config, { services: [], workloads: [], httpRoutes: [] });
  t.is((wp?.config.authorizationPolicies as unknown[] | undefined)?.length, 1);
});

const DESTINATION_RULE = `kind: DestinationRule
metadata: { name: svc, namespace: ns1 }
spec:
  host: svc.ns1.svc.cluster.local
  trafficPolicy:
    loadBalancer: { simple: LEAST_REQUEST }
    connectionPool: { tcp: { maxConnections: 10 }, http: { http1MaxPendingRequests: 5, http2MaxRequests: 20 } }
    outlierDetection: { consecutive5xxErrors: 3, interval: 5s, baseEjectionTime: 15s, maxEjectionPercent: 50 }
`;

test("a DestinationRule for one of the waypoint's services becomes its backend policy", (t) => {
  const labelled = NAMESPACE_YAML.replace('ambient\n', 'ambient\n    istio.io/use-waypoint: wp\n');
  const [wp] = waypoints(
    labelled,
    podYaml('a', '10.1.0.1'),
    SERVICE_YAML,
    GATEWAY,
    WAYPOINT_POD,
    DESTINATION_RULE,
  );
  t.deepEqual(wp?.config.backendPolicies, [
    {
      service: 'ns1/svc.ns1.svc.cluster.local',
      loadBalancer: 'LEAST_REQUEST',
      circuitBreaker: { maxConnections: 10, maxPendingRequests: 5, maxRequests: 20 },
      outlierDetection: {
        consecutive5xx: 3,
        interval: '5s',
        baseEjectionTime: '15s',
        maxEjectionPercent: 50,
      },
    },
  ]);
});

test('a DestinationRule for a service the waypoint does not serve is not sent to it', (t) => {
  const [wp] = waypoints(
    NAMESPACE_YAML,
    podYaml('a', '10.1.0.1'),
    SERVICE_YAML,
    GATEWAY,
    WAYPOINT_POD,
    DESTINATION_RULE,
  );
  t.deepEqual(wp?.config.backendPolicies, []);
});

const REQUEST_AUTHN = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: jwt, namespace: ns1 }
spec:
  targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: wp }]
  jwtRules: [{ issuer: https://issuer.example, jwksUri: http://127.0.0.1:9000/jwks }]
`;

test('a RequestAuthentication that targets the waypoint reaches it as written', (t) => {
  const [wp] = waypoints(NAMESPACE_YAML, SERVICE_YAML, GATEWAY, WAYPOINT_POD, REQUEST_AUTHN);
  t.deepEqual(wp?.config.requestAuthentications, [
    {
      name: 'jwt',
      namespace: 'ns1',
      targetRefs: [{ kind: 'Gateway', group: 'gateway.networking.k8s.io', name: 'wp' }],
      jwtRules: [{ issuer: 'https://issuer.example', jwksUri: 'http://127.0.0.1:9000/jwks' }],
    },
  ]);
});

test('apply refuses a RequestAuthentication the waypoint could not serve, naming each field', (t) => {
  const store = new ConfigStore();
  const applied = store.applyYaml(`kind: RequestAuthentication
metadata: { name: sidecar-only, namespace: ns1 }
spec:
  selector: { matchLabels: { app: a } }
  jwtRules: [{ issuer: other, jwksUri: "https://idp.example.com/keys" }]
`);
  t.false(applied.ok);
  const text = applied.ok ? '' : applied.error.join('\n');
  t.regex(text, /spec.targetRefs: zmesh verifies JWTs at waypoints only/);
  t.regex(text, /spec.jwtRules\[0\].jwksUri: host idp.example.com is outside the mesh/);
});
