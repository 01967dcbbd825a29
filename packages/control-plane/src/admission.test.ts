import { isPeerAuthenticationPolicy } from '@zmesh/shared';
import test from 'ava';
import { parse } from 'yaml';
import { admit } from './admission.js';
import { compile } from './compiler.js';
import { ConfigStore } from './config-store.js';
import { convertForZtunnel } from './control-plane.js';
import { objectKey } from './k8s-objects.js';
import { parseObject } from './parse-object.js';
import { NAMESPACE_YAML, podYaml, SERVICE_YAML } from './testing/fixtures.js';

const DENY_TYPO = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-x, namespace: ns1 }
spec:
  action: DENY
  selector: { matchLabels: { app: a } }
  rules:
    - from:
        - source: { principal: ["cluster.local/ns/ns1/sa/x"] }
`;

const policy = (spec: string) =>
  `kind: AuthorizationPolicy\nmetadata: { name: p, namespace: ns1 }\nspec: ${spec}\n`;

const WAYPOINT = `kind: Gateway
metadata: { name: waypoint, namespace: ns1 }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 10.2.0.1 }] }
`;

test('admission refuses an unknown field, naming file, document, object, path and reason', (t) => {
  const store = new ConfigStore();
  const r = store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1'), DENY_TYPO].join('---\n'), 'deny.yaml');
  t.false(r.ok);
  t.deepEqual(!r.ok && r.error, [
    'deny.yaml#2 (AuthorizationPolicy ns1/deny-x): spec.rules[0].from[0].source.principal: unknown field',
  ]);
  t.is(store.view().objects.size, 0, 'atomic: the valid documents of a refused apply are not stored either');
  t.is(store.view().generation, 0);
});

test('admission refuses bad enums and wrong types, every reason at once', (t) => {
  const store = new ConfigStore();
  const r = store.applyYaml(
    [
      policy('{ action: DENNY }'),
      policy('{ selector: { matchLabels: { app: 3 } }, rules: x }').replace('name: p', 'name: q'),
    ].join('---\n'),
    'p.yaml',
  );
  t.deepEqual(!r.ok && r.error, [
    'p.yaml#0 (AuthorizationPolicy ns1/p): spec.action: must be one of ALLOW, DENY, AUDIT, CUSTOM, got "DENNY"',
    'p.yaml#1 (AuthorizationPolicy ns1/q): spec.selector.matchLabels.app: must be a string, got 3',
    'p.yaml#1 (AuthorizationPolicy ns1/q): spec.rules: must be a list',
  ]);
});

test('admission refuses a use-waypoint naming no waypoint Gateway, and deleting a Gateway still named', (t) => {
  const store = new ConfigStore();
  const ns = NAMESPACE_YAML.replace('ambient', 'ambient\n    istio.io/use-waypoint: waypoint');
  const r = store.applyYaml(ns, 'ns.yaml');
  t.deepEqual(!r.ok && r.error, [
    'ns.yaml#0 (Namespace /ns1): metadata.labels.istio.io/use-waypoint: names waypoint ns1/waypoint, but no Gateway ns1/waypoint with gatewayClassName istio-waypoint is in the config',
  ]);
  t.true(store.applyYaml([WAYPOINT, ns].join('---\n'), 'both.yaml').ok);
  const del = store.remove(['Gateway/ns1/waypoint']);
  t.false(del.ok);
  t.regex(
    !del.ok ? (del.error[0] ?? '') : '',
    /^both\.yaml#1 \(Namespace \/ns1\): .*names waypoint ns1\/waypoint/,
  );
  t.true(store.view().objects.has('Gateway/ns1/waypoint'));
  t.true(store.applyYaml(NAMESPACE_YAML).ok, 'once nothing names it...');
  t.true(store.remove(['Gateway/ns1/waypoint']).ok, '...the Gateway can go');
});

test('an HTTPRoute backendRef naming no Service is refused (BackendNotFound); deleting a Service a route sends to is too', (t) => {
  const store = new ConfigStore();
  const route = `kind: HTTPRoute
metadata: { name: r, namespace: ns1 }
spec:
  parentRefs: [{ kind: Service, name: svc, port: 80 }]
  rules:
    - backendRefs: [{ name: svc, port: 80 }, { name: gone, port: 80 }]
      filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: x-a, value: "1" }] } }]
`;
  const r = store.applyYaml([NAMESPACE_YAML, SERVICE_YAML, route].join('---\n'), 'route.yaml');
  t.deepEqual(!r.ok && r.error, [
    'route.yaml#2 (HTTPRoute ns1/r): spec.rules[0].backendRefs[1]: BackendNotFound: no Service ns1/gone (Gateway API ResolvedRefs=False)',
  ]);
  const fixed = route.replace(
    '{ name: gone, port: 80 }',
    '{ name: svc, namespace: ns1, port: 80, weight: 0 }',
  );
  t.true(store.applyYaml([NAMESPACE_YAML, SERVICE_YAML, fixed].join('---\n'), 'route.yaml').ok);
  const del = store.remove(['Service/ns1/svc']);
  t.false(del.ok);
  t.regex(
    !del.ok ? (del.error[0] ?? '') : '',
    /HTTPRoute ns1\/r\): spec\.rules\[0\]\.backendRefs\[0\]: BackendNotFound/,
  );
});

test('a Pod whose Namespace is not in the config is refused; so is deleting a Namespace that holds pods', (t) => {
  const store = new ConfigStore();
  const r = store.applyYaml(podYaml('a', '10.1.0.1'), 'pod.yaml');
  t.deepEqual(!r.ok && r.error, [
    'pod.yaml#0 (Pod ns1/a): metadata.namespace: namespace ns1 is not in the config',
  ]);
  t.true(store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n')).ok);
  t.false(store.remove(['Namespace//ns1']).ok);
  t.true(store.remove(['Pod/ns1/a', 'Namespace//ns1']).ok, 'both in one delete');
});

test('delete is all or nothing; a key that is not applied refuses the whole delete', (t) => {
  const store = new ConfigStore();
  t.true(store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1'), SERVICE_YAML].join('---\n')).ok);
  const r = store.removeYaml([podYaml('a', '10.1.0.1'), podYaml('zz', '10.1.0.9')].join('---\n'), 'd.yaml');
  t.deepEqual(!r.ok && r.error, ['Pod/ns1/zz: not found']);
  t.true(store.view().objects.has('Pod/ns1/a'));
  t.true(store.removeYaml(podYaml('a', '10.1.0.1')).ok);
  t.false(store.view().objects.has('Pod/ns1/a'));
});

test('apply and serve agree: whatever admission admits, the compiler serves, and only that', (t) => {
  const cases = [
    '{ action: DENY }',
    '{ action: ALLOW, selector: { matchLabels: { app: a } }, rules: [{ from: [{ source: { principals: ["x"] } }] }] }',
    '{ action: DENNY }',
    '{ action: DENY, rules: [{ to: [{ operation: { ports: ["80"] } }] }] }',
    '{ action: DENY, rules: [{ to: [{ operation: { port: ["80"] } }] }] }',
    '{ action: ALLOW, rules: [{ from: [{ source: { namespaces: "ns1" } }] }] }',
    '{ action: AUDIT }',
    '{ selector: { matchLabels: { app: a } }, rules: [{ when: [{ key: source.ip, values: [10.0.0.0/8] }] }] }',
    '{ selector: { matchLabels: { app: a } }, rules: [{ when: [{ key: request.auth.claims, values: [x] }] }] }',
  ];
  let refused = 0;
  for (const spec of cases) {
    const doc = parse(policy(spec));
    const admitted = new ConfigStore().apply([doc]).ok;
    // The serve path with no admission in front: parse, then the control plane's compiler.
    const object = parseObject(doc, []);
    if (object === undefined) return t.fail(spec);
    const view = { generation: 1, objects: new Map([[objectKey(object), object]]) };
    const served = compile(view, { trustDomain: 'cluster.local', convertPolicy: convertForZtunnel });
    // The static STRICT policy (PeerAuthentication) is always served beside it.
    const policies = served.authorizations.filter((a) => !isPeerAuthenticationPolicy(a.name));
    t.is(admitted, policies.length === 1, spec);
    if (!admitted) refused++;
  }
  t.true(refused >= 3, 'the cases include refusals');
});

test('admit is pure: same objects, same reasons, nothing retained between calls', (t) => {
  const store = new ConfigStore();
  t.true(store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n')).ok);
  const objects = store.view().objects;
  t.deepEqual(admit(objects), []);
  t.deepEqual(admit(objects), []);
});
