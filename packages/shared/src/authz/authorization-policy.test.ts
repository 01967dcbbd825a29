import test from 'ava';
import { parse } from 'yaml';
import {
  type ConvertedPolicy,
  convertAuthorizationPolicy,
  convertRequestAuthentication,
} from './authorization-policy.js';
import { type Authorization, type Rule, validateAuthorization } from './policy-model.js';

function policy(spec: string, meta = 'name: p\n  namespace: shop'): unknown {
  return parse(
    `apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  ${meta}\nspec:\n${spec}`,
  );
}

function ztunnel(
  input: unknown,
  root?: string,
): { a: Authorization; warnings: readonly string[]; c: ConvertedPolicy } {
  const r = convertAuthorizationPolicy(input, root === undefined ? {} : { rootNamespace: root });
  if (!r.ok) throw new Error(r.error.join('\n'));
  if (r.value.target !== 'ztunnel') throw new Error('expected a ztunnel policy');
  return { a: r.value.authorization, warnings: r.value.warnings, c: r.value };
}

const rules = (input: unknown): readonly Rule[] => ztunnel(input).a.rules;

test('namespace-wide ALLOW: from and to become two clauses of one rule', (t) => {
  const { a, warnings } = ztunnel(
    policy(`  rules:
  - from:
    - source: {principals: ["cluster.local/ns/web/sa/front"]}
    - source: {namespaces: ["batch"]}
    to:
    - operation: {ports: ["8080", 9090]}`),
  );
  t.deepEqual(warnings, []);
  t.like(a, { name: 'p', namespace: 'shop', scope: 'NAMESPACE', action: 'ALLOW', dryRun: false });
  t.deepEqual(a.rules, [
    {
      clauses: [
        { matches: [{ destinationPorts: [8080, 9090] }] },
        {
          matches: [
            { principals: [{ exact: 'cluster.local/ns/web/sa/front' }] },
            { namespaces: [{ exact: 'batch' }] },
          ],
        },
      ],
    },
  ]);
  t.true(validateAuthorization(a).ok);
});

test('scope: root namespace is GLOBAL, a selector is WORKLOAD_SELECTOR and is returned', (t) => {
  t.is(ztunnel(policy('  action: DENY', 'name: p\n  namespace: mesh-root'), 'mesh-root').a.scope, 'GLOBAL');
  const { a, c } = ztunnel(policy('  selector: {matchLabels: {app: db}}'));
  t.is(a.scope, 'WORKLOAD_SELECTOR');
  t.deepEqual(c.target === 'ztunnel' ? c.selector : undefined, { app: 'db' });
  t.is(ztunnel(policy('  selector: {matchLabels: {}}')).a.scope, 'NAMESPACE');
});

test('an empty spec is ALLOW-nothing (deny all); one empty rule allows all', (t) => {
  t.deepEqual(rules(parse('metadata: {name: deny-all, namespace: shop}\nspec: {}')), []);
  t.deepEqual(rules(policy('  rules: [{}]')), [{ clauses: [] }]);
});

test('wildcards, service accounts and IP blocks', (t) => {
  const r = rules(
    policy(`  rules:
  - from:
    - source:
        principals: ["*", "*/sa/web", "cluster.local/ns/a/*"]
        serviceAccounts: ["web", "other/job"]
        ipBlocks: ["10.0.0.0/8", "10.1.2.3", "fd00::/64", "::ffff:10.9.0.0/112"]`),
  );
  t.deepEqual(r[0]!.clauses[0]!.matches[0], {
    principals: [{ presence: {} }, { suffix: '/sa/web' }, { prefix: 'cluster.local/ns/a/' }],
    serviceAccounts: [
      { namespace: 'shop', serviceAccount: 'web' },
      { namespace: 'other', serviceAccount: 'job' },
    ],
    sourceIps: [
      { address: '10.0.0.0', length: 8 },
      { address: '10.1.2.3', length: 32 },
      { address: 'fd00::', length: 64 },
      { address: '10.9.0.0', length: 16 },
    ],
  });
});

test('L4 when conditions become one-match clauses', (t) => {
  const r = rules(
    policy(`  rules:
  - when:
    - {key: source.ip, values: ["10.0.0.0/8"], notValues: ["10.0.0.1"]}
    - {key: destination.port, notValues: ["22"]}
    - {key: source.principal, values: ["*"]}`),
  );
  t.deepEqual(r[0]!.clauses, [
    {
      matches: [
        {
          sourceIps: [{ address: '10.0.0.0', length: 8 }],
          notSourceIps: [{ address: '10.0.0.1', length: 32 }],
        },
      ],
    },
    { matches: [{ notDestinationPorts: [22] }] },
    { matches: [{ principals: [{ presence: {} }] }] },
  ]);
});

test('ALLOW with L7 attributes: the L7 rule is dropped, L4 rules kept, with a warning', (t) => {
  const { a, warnings } = ztunnel(
    policy(`  rules:
  - to: [{operation: {methods: ["GET"], ports: ["80"]}}]
  - from: [{source: {namespaces: ["web"]}}]`),
  );
  t.deepEqual(a.rules, [{ clauses: [{ matches: [{ namespaces: [{ exact: 'web' }] }] }] }]);
  t.is(warnings.length, 1);
  t.regex(warnings[0]!, /found: methods\)/);
  t.regex(warnings[0]!, /rules matching HTTP attributes are omitted/);
});

test('DENY with L7 attributes keeps the L4 part and denies more (fail closed)', (t) => {
  const r = rules(
    policy(`  action: DENY
  rules:
  - to: [{operation: {methods: ["DELETE"], ports: ["8080"]}}]
    from: [{source: {namespaces: ["batch"], requestPrincipals: ["*"]}}]`),
  );
  t.deepEqual(r, [
    {
      clauses: [
        { matches: [{ destinationPorts: [8080] }] },
        { matches: [{ namespaces: [{ exact: 'batch' }] }] },
      ],
    },
  ]);
});

test('targetRefs make a waypoint policy, which ztunnel does not get', (t) => {
  const r = convertAuthorizationPolicy(
    policy(`  action: AUDIT
  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: waypoint}]
  rules: [{to: [{operation: {paths: ["/x"]}}]}]`),
  );
  t.deepEqual(r, {
    ok: true,
    value: {
      target: 'waypoint',
      name: 'p',
      namespace: 'shop',
      targetRefs: [{ kind: 'Gateway', name: 'waypoint', group: 'gateway.networking.k8s.io' }],
      warnings: [],
    },
  });
  const svc = convertAuthorizationPolicy(policy('  targetRef: {kind: Service, name: api}'));
  t.like(svc, { ok: true, value: { target: 'waypoint' } });
});

test('a waypoint policy is checked by the waypoint’s reader: what the waypoint cannot serve, apply refuses', (t) => {
  const reasons = (spec: string) => {
    const r = convertAuthorizationPolicy(policy(`  targetRefs: [{kind: Gateway, name: waypoint}]\n${spec}`));
    return r.ok ? [] : r.error;
  };
  t.deepEqual(reasons('  action: CUSTOM\n  provider: {name: ext}'), [
    'spec.action: CUSTOM (external authorization) is not supported by the zmesh waypoint',
  ]);
  t.deepEqual(
    reasons(`  rules:
  - from: [{source: {requestPrincipals: ["https://idp/*"], remoteIpBlocks: ["10.0.0.0/8"]}}]
    to: [{operation: {paths: ["/api*", "*.css"], hosts: ["a.example"], ports: ["8080"]}}]
    when: [{key: "request.auth.claims[groups]", values: [admins]}, {key: remote.ip, values: ["10.1.0.0/16"]}]`),
    [],
  );
  t.deepEqual(
    reasons(`  rules:
  - to: [{operation: {paths: ["/a/{*}"]}}]
    when: [{key: connection.sni, values: [x]}, {key: source.ip, values: ["10.0.0.0/99"]}]`),
    [
      'spec.rules[0].to[0].operation.paths[0]: "/a/{*}": path templates ({*}, {**}) are not supported',
      'spec.rules[0].when[0].key: "connection.sni" is not supported; use one of request.headers[<name>], request.auth.claims[<claim>]..., request.auth.principal, request.auth.audiences, request.auth.presenter, source.principal, source.namespace, source.ip, remote.ip, destination.ip, destination.port',
      'spec.rules[0].when[1].values[0]: prefix length 99 exceeds 32 for 10.0.0.0',
    ],
  );
});

test('RequestAuthentication admission: targetRefs required, jwtRules through the waypoint’s reader', (t) => {
  const ra = (spec: string) =>
    convertRequestAuthentication(
      parse(
        `apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: shop}\nspec:\n${spec}`,
      ),
    );
  t.like(
    ra(`  targetRefs: [{kind: Gateway, name: waypoint}]
  jwtRules: [{issuer: https://idp, jwksUri: "http://keys.auth.svc.cluster.local/jwks", audiences: [shop]}]`),
    { ok: true, value: { name: 'jwt', namespace: 'shop' } },
  );
  const refused = ra(`  selector: {matchLabels: {app: a}}
  jwtRules: [{issuer: https://idp, jwksUri: "https://idp.example.com/jwks", fromCookies: [s]}]`);
  t.false(refused.ok);
  const text = refused.ok ? '' : refused.error.join('\n');
  t.regex(text, /spec.targetRefs: zmesh verifies JWTs at waypoints only/);
  t.regex(text, /spec.jwtRules\[0\].jwksUri: host idp.example.com is outside the mesh/);
  t.regex(text, /spec.jwtRules\[0\].fromCookies: unknown field/);
});

test('dry-run annotation and spiffe:// principals', (t) => {
  const { a, warnings } = ztunnel(
    policy(
      '  rules: [{from: [{source: {principals: ["spiffe://td/ns/a/sa/b"]}}]}]',
      "name: p\n  namespace: shop\n  annotations: {istio.io/dry-run: 'true'}",
    ),
  );
  t.true(a.dryRun);
  t.deepEqual(a.rules[0]!.clauses[0]!.matches[0], { principals: [{ exact: 'td/ns/a/sa/b' }] });
  t.regex(warnings[0]!, /without spiffe:\/\//);
});

const INVALID: [string, unknown, string[]][] = [
  ['not an object', 'nope', ['policy: must be an object']],
  [
    'missing metadata',
    parse('spec: {}'),
    ['metadata: must be an object', 'metadata.name:', 'metadata.namespace:'],
  ],
  [
    'unknown action',
    policy('  action: REJECT'),
    ['spec.action: must be one of ALLOW, DENY, AUDIT, CUSTOM, got "REJECT"'],
  ],
  ['AUDIT at ztunnel', policy('  action: AUDIT'), ['ztunnel does not support the AUDIT action']],
  ['CUSTOM at ztunnel', policy('  action: CUSTOM'), ['ztunnel does not support the CUSTOM action']],
  [
    'malformed CIDR',
    policy('  rules: [{from: [{source: {ipBlocks: ["10.0.0.0/33", "10.0.0.300"]}}]}]'),
    [
      'spec.rules[0].from[0].source.ipBlocks[0]: prefix length 33 exceeds 32',
      'spec.rules[0].from[0].source.ipBlocks[1]:',
    ],
  ],
  [
    'port out of range',
    policy('  rules: [{to: [{operation: {ports: ["70000", "0", "http", -1]}}]}]'),
    ['ports[0]: port must be', 'ports[1]: port must be', 'ports[2]: port must be', 'ports[3]: port must be'],
  ],
  [
    'wrong types',
    policy('  rules: [{from: [{source: {principals: "a", namespaces: [1]}}]}]'),
    ['principals: must be a list', 'namespaces[0]: must be a non-empty string, got 1'],
  ],
  [
    'unknown source field',
    policy('  rules: [{from: [{source: {principal: ["a"]}}]}]'),
    ['spec.rules[0].from[0].source.principal: unknown field'],
  ],
  [
    'empty source',
    policy('  rules: [{from: [{source: {}}]}]'),
    ['spec.rules[0].from[0].source: has no condition'],
  ],
  [
    'missing operation',
    policy('  rules: [{to: [{}]}]'),
    ['spec.rules[0].to[0].operation: must be an object'],
  ],
  [
    'unknown when key',
    policy('  rules: [{when: [{key: source.ipp, values: ["x"]}]}]'),
    ['unknown condition key "source.ipp"'],
  ],
  [
    'when without values',
    policy('  rules: [{when: [{key: source.ip}]}]'),
    ['spec.rules[0].when[0]: needs values or notValues'],
  ],
  [
    'bad when port',
    policy('  rules: [{when: [{key: destination.port, values: ["x"]}]}]'),
    ['when[0].values[0]: port must be'],
  ],
  [
    'wildcard in the middle',
    policy('  rules: [{from: [{source: {namespaces: ["a*b"]}}]}]'),
    ['has a wildcard other than at the start or end'],
  ],
  [
    'bad service account',
    policy('  rules: [{from: [{source: {serviceAccounts: ["a/b/c"]}}]}]'),
    ['must be "namespace/name" or "name"'],
  ],
  [
    'selector and targetRefs',
    policy('  selector: {matchLabels: {a: b}}\n  targetRefs: [{kind: Service, name: s}]'),
    ['set selector or targetRefs, not both'],
  ],
  [
    'bad targetRef kind',
    policy('  targetRefs: [{kind: Pod, name: s}]'),
    ['spec.targetRefs[0].kind: must be one of'],
  ],
  [
    'bad dry-run annotation',
    policy('  {}', 'name: p\n  namespace: s\n  annotations: {istio.io/dry-run: yes}'),
    ['istio.io/dry-run: must be "true" or "false"'],
  ],
  ['unknown spec field', policy('  rule: []'), ['spec.rule: unknown field']],
];

for (const [name, input, expected] of INVALID) {
  test(`invalid input is rejected with every reason: ${name}`, (t) => {
    const r = convertAuthorizationPolicy(input);
    if (r.ok) return t.fail(`accepted: ${JSON.stringify(r.value)}`);
    for (const reason of expected)
      t.true(
        r.error.some((e) => e.includes(reason)),
        `${reason} in ${r.error.join(' | ')}`,
      );
    t.true(r.error.length >= expected.length);
  });
}

test('several problems are all reported at once', (t) => {
  const r = convertAuthorizationPolicy(
    policy(`  action: NOPE
  rules:
  - from: [{source: {ipBlocks: ["x"]}}]
    to: [{operation: {ports: ["99999"]}}]`),
  );
  t.false(r.ok);
  if (!r.ok) t.is(r.error.length, 3, r.error.join('\n'));
});
