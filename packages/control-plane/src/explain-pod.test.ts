import test from 'ava';
import { ControlPlane } from './control-plane.js';
import { podYaml } from './testing/fixtures.js';

/**
 * `GET /explain/pod` (the control plane's half of `zmesh x describe pod`) and `GET
 * /route-status`, from one applied config: a waypoint for the namespace, policies that
 * target its Gateway, a Service the pod backs, and a Service it does not; PeerAuthentication
 * at each level.
 */
const BASE = `apiVersion: v1
kind: Namespace
metadata: { name: ns1, labels: { istio.io/dataplane-mode: ambient, istio.io/use-waypoint: waypoint } }
---
apiVersion: v1
kind: Namespace
metadata: { name: istio-system }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: ns1 }
spec: { gatewayClassName: istio-waypoint }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: ns1 }
spec: { clusterIP: 10.96.0.10, selector: { app: a }, ports: [{ port: 80, targetPort: 8080 }] }
---
apiVersion: v1
kind: Service
metadata: { name: other, namespace: ns1 }
spec: { clusterIP: 10.96.0.11, selector: { app: b }, ports: [{ port: 80, targetPort: 8080 }] }
---
${podYaml('a', '10.1.0.1')}---
${podYaml('b', '10.1.0.2')}---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: gw-deny, namespace: ns1 }
spec:
  targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]
  action: DENY
  rules: [{ to: [{ operation: { paths: [/admin*] } }] }]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: web-allow, namespace: ns1 }
spec:
  targetRefs: [{ kind: Service, group: "", name: web }]
  action: ALLOW
  rules: [{ to: [{ operation: { methods: [GET] } }] }]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: other-allow, namespace: ns1 }
spec:
  targetRefs: [{ kind: Service, group: "", name: other }]
  action: ALLOW
  rules: [{ to: [{ operation: { methods: [POST] } }] }]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: l4-selector, namespace: ns1 }
spec:
  selector: { matchLabels: { app: a } }
  action: DENY
  rules: [{ to: [{ operation: { ports: ["9999"] } }] }]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: jwt, namespace: ns1 }
spec:
  targetRefs: [{ kind: Service, group: "", name: web }]
  jwtRules: [{ issuer: https://issuer.example, jwksUri: http://127.0.0.1:9000/jwks }]
`;

const pa = (name: string, ns: string, spec: string) => `---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: ${name}, namespace: ${ns} }
spec: ${spec}
`;

async function controlPlane(extra = '') {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const applied = await cp.store.submit({ applyYaml: BASE + extra, source: 'test' });
  if (!applied.ok) throw new Error(JSON.stringify(applied));
  return cp;
}

test('L7 policies for a pod: targetRef to its waypoint Gateway, or to a Service it backs; not a Service it does not back, nor a selector policy', async (t) => {
  const cp = await controlPlane();
  const a = cp.explainPod('ns1', 'a');
  t.deepEqual(a?.waypoints, ['ns1/waypoint']);
  t.deepEqual(
    a?.l7Policies.map((p) => [p.kind, p.name, p.action, p.why]),
    [
      [
        'AuthorizationPolicy',
        'gw-deny',
        'DENY',
        'targetRef Gateway ns1/waypoint: every request this waypoint carries',
      ],
      [
        'AuthorizationPolicy',
        'web-allow',
        'ALLOW',
        'targetRef Service ns1/web, which the pod backs: requests addressed to it',
      ],
      [
        'RequestAuthentication',
        'jwt',
        'JWT',
        'targetRef Service ns1/web, which the pod backs: requests addressed to it',
      ],
    ],
  );
  t.deepEqual(
    cp.explainPod('ns1', 'b')?.l7Policies.map((p) => p.name),
    ['gw-deny', 'other-allow'],
  );
  t.is(cp.explainPod('ns1', 'nope'), undefined);
});

test('PeerAuthentication in force: default, mesh-wide, namespace-wide, selector, with ports that differ', async (t) => {
  const mode = async (extra: string) =>
    (await controlPlane(extra)).explainPod('ns1', 'a')?.peerAuthentication;
  t.deepEqual(await mode(''), {
    mode: 'STRICT',
    why: "no PeerAuthentication sets a mode: zmesh's default (STRICT)",
    ports: {},
  });
  t.deepEqual(await mode(pa('default', 'istio-system', '{ mtls: { mode: PERMISSIVE } }')), {
    mode: 'PERMISSIVE',
    why: 'PeerAuthentication istio-system/default: mesh-wide (root namespace istio-system)',
    ports: {},
  });
  t.like(
    await mode(
      pa('default', 'istio-system', '{ mtls: { mode: PERMISSIVE } }') +
        pa('ns', 'ns1', '{ mtls: { mode: STRICT } }'),
    ),
    { mode: 'STRICT', why: 'PeerAuthentication ns1/ns: namespace-wide' },
  );
  t.deepEqual(
    await mode(
      pa('ns', 'ns1', '{ mtls: { mode: STRICT } }') +
        pa(
          'a-only',
          'ns1',
          '{ selector: { matchLabels: { app: a } }, mtls: { mode: DISABLE }, portLevelMtls: { "9000": { mode: STRICT } } }',
        ),
    ),
    {
      mode: 'PERMISSIVE',
      why: 'PeerAuthentication ns1/a-only selects the pod (app=a) (DISABLE: plaintext accepted, as PERMISSIVE in ambient)',
      ports: { '9000': 'STRICT' },
    },
  );
});

test('route status: Accepted when a waypoint programs it for that parent, NoMatchingParent otherwise; BackendNotFound names the missing backends', async (t) => {
  const cp = await controlPlane();
  // The store admits with status (Kubernetes mode) so a missing backend is kept, as the API server keeps it.
  const synced = cp.store.sync(
    [
      {
        apiVersion: 'gateway.networking.k8s.io/v1',
        kind: 'HTTPRoute',
        metadata: { name: 'r', namespace: 'ns1' },
        spec: {
          parentRefs: [
            { group: '', kind: 'Service', name: 'web' },
            { group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' },
            { group: '', kind: 'Service', name: 'gone' },
          ],
          rules: [
            {
              backendRefs: [
                { name: 'web', port: 80 },
                { name: 'missing', port: 80 },
              ],
            },
          ],
        },
      },
    ],
    [],
    'test',
  );
  t.true(synced.ok, JSON.stringify(synced));
  const [r] = cp.routeStatus();
  t.deepEqual(
    r?.parents.map((p) => [
      `${p.parentRef.kind} ${p.parentRef.name}`,
      p.waypoint,
      ...p.conditions.map((c) => `${c.type}=${c.status} ${c.reason}: ${c.message}`),
    ]),
    [
      [
        'Service web',
        'ns1/waypoint',
        'Accepted=True Accepted: programmed in waypoint ns1/waypoint',
        'ResolvedRefs=False BackendNotFound: no Service ns1/missing: requests sent there are answered 500',
      ],
      [
        'Gateway waypoint',
        null,
        'Accepted=False NoMatchingParent: a waypoint takes mesh routes through a Service parentRef (GAMMA), not its Gateway ns1/waypoint',
        'ResolvedRefs=False BackendNotFound: no Service ns1/missing: requests sent there are answered 500',
      ],
      [
        'Service gone',
        null,
        'Accepted=False NoMatchingParent: no Service ns1/gone',
        'ResolvedRefs=False BackendNotFound: no Service ns1/missing: requests sent there are answered 500',
      ],
    ],
  );
});
