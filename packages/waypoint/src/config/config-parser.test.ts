import test from 'ava';
import fc from 'fast-check';
import { decodeWaypointConfig, parseWaypointConfig } from './config-parser.js';

const BASE = `
waypoint: { name: waypoint, namespace: team-b }
workloads:
  - { name: v1, namespace: team-b, addresses: [10.0.0.1], services: { team-b/server.team-b.svc.cluster.local: [{ servicePort: 80, targetPort: 8080 }] } }
services:
  - { name: server, namespace: team-b, addresses: [10.96.0.1], ports: [{ servicePort: 80, targetPort: 8080 }] }
`;

test('a full config parses into the model', (t) => {
  const r = parseWaypointConfig(
    `${BASE}
httpRoutes:
  - name: r
    parentRefs: [{ name: server, port: 80 }]
    rules:
      - matches: [{ path: { type: PathPrefix, value: /api }, headers: [{ name: X-Canary, value: "1" }], method: get }]
        backendRefs: [{ name: server, weight: 3 }]
        timeouts: { request: 1.5s }
        retry: { attempts: 3, retryOn: "5xx,reset", perTryTimeout: 200ms }
        rateLimit: { maxTokens: 10, fillInterval: 1s }
        fault: { delay: { percent: 50, fixedDelay: 10ms } }
authorizationPolicies:
  - name: p
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: DENY
    rules: [{ from: [{ source: { notPrincipals: ["a/b"] } }], to: [{ operation: { ports: ["80"] } }], when: [{ key: "request.headers[X-User]", values: ["x"] }] }]
  - name: for-ztunnel
    action: ALLOW
    rules: [{}]
backendPolicies:
  - service: team-b/server.team-b.svc.cluster.local
    loadBalancer: LEAST_REQUEST
    circuitBreaker: { maxRequests: 5 }
    outlierDetection: { consecutive5xx: 3, baseEjectionTime: 10s }
`,
    'test',
  );
  if (!r.ok) return t.fail(r.error.join('\n'));
  const cfg = r.value;
  t.is(cfg.serviceAccount, 'waypoint');
  const rule = cfg.routes[0]!.rules[0]!;
  t.deepEqual(rule.matches[0], {
    path: { type: 'PathPrefix', value: '/api' },
    headers: [{ type: 'Exact', name: 'x-canary', value: '1' }],
    method: 'GET',
  });
  t.deepEqual(rule.backendRefs, [{ name: 'server', namespace: 'team-b', weight: 3 }]);
  t.is(rule.timeouts?.requestMs, 1500);
  t.is(rule.retry?.attempts, 3);
  t.deepEqual(rule.retry?.retryOn, ['5xx', 'reset']);
  t.is(rule.retry?.perTryTimeoutMs, 200);
  t.deepEqual(rule.rateLimit, { maxTokens: 10, tokensPerFill: 10, fillIntervalMs: 1000 });
  t.deepEqual(rule.fault, { delay: { percent: 50, fixedDelayMs: 10 } });
  t.is(cfg.policies.length, 1, 'a policy without targetRefs is ztunnel’s, not ours');
  t.deepEqual(cfg.policies[0]!.rules[0]!.to, [{ ports: [80] }]);
  t.deepEqual(cfg.policies[0]!.rules[0]!.when, [
    { key: 'request.headers[X-User]', attr: { kind: 'header', name: 'x-user' }, values: ['x'] },
  ]);
  t.is(cfg.backendPolicies[0]!.circuitBreaker.maxRequests, 5);
  t.is(cfg.backendPolicies[0]!.circuitBreaker.maxConnections, 1024, "Envoy's default");
  t.is(cfg.backendPolicies[0]!.outlier.baseEjectionMs, 10_000);
  t.is(cfg.backendPolicies[0]!.outlier.intervalMs, 10_000);
});

test('an invalid config is refused with every reason, each naming its path', (t) => {
  const r = parseWaypointConfig(
    `${BASE}
httpRoutes:
  - name: r
    parentRefs: [{ name: nope }]
    rules:
      - matches: [{ path: { type: RegularExpression, value: "(" } }, { path: { type: Exact, value: "no-slash" } }]
        backendRefs: [{ name: missing, weight: -1 }]
        retry: { attempts: 99, retryOn: "5xx,sometimes" }
        typo: 1
authorizationPolicies:
  - name: p
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: CUSTOM
    rules: [{ when: [{ key: "source.ip" , values: [x] }, { key: "connection.sni", values: [a] }] }]
`,
    'cfg.yaml',
  );
  t.false(r.ok);
  if (r.ok) return;
  const text = r.error.join('\n');
  for (const needle of [
    'httpRoutes[0].parentRefs[0]: no service team-b/nope',
    'rules[0].matches[0].path.value: invalid regex',
    'rules[0].matches[1].path.value: must start with /',
    'backendRefs[0].weight',
    'rules[0].retry.attempts',
    'unknown condition sometimes',
    'rules[0].typo: unknown field',
    'authorizationPolicies[0].action: CUSTOM (external authorization) is not supported',
    'when[0].values[0]: address "x" is not an IP address',
    'when[1].key: "connection.sni" is not supported; use one of request.headers[<name>]',
  ]) {
    t.true(text.includes(needle), `missing reason: ${needle}\n${text}`);
  }
  t.true(r.error.every((e) => e.startsWith('cfg.yaml: ')));
});

test('broken YAML and non-objects are reasons, not exceptions', (t) => {
  t.false(parseWaypointConfig('a: [', 'x').ok);
  t.false(decodeWaypointConfig(42, 'x').ok);
  t.false(decodeWaypointConfig([], 'x').ok);
});

test('decoding never throws on arbitrary input', (t) => {
  fc.assert(
    fc.property(fc.jsonValue(), (v) => {
      decodeWaypointConfig(
        {
          waypoint: { name: 'w', namespace: 'n' },
          httpRoutes: v,
          authorizationPolicies: v,
          services: v,
          workloads: v,
          backendPolicies: v,
        },
        'fuzz',
      );
      decodeWaypointConfig(v, 'fuzz');
    }),
    { numRuns: 300 },
  );
  t.pass();
});

test('AuthorizationPolicy L7 fields: request principals, IP blocks, claims and IP conditions; bad forms refused', (t) => {
  const policy = (rules: string, action = 'ALLOW') =>
    parseWaypointConfig(
      `
waypoint: { name: waypoint, namespace: ns }
authorizationPolicies:
  - name: p
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: ${action}
    rules: [${rules}]
`,
      'f',
    );
  const r = policy(
    `{ from: [{ source: { requestPrincipals: ["https://idp/*"], ipBlocks: ["10.0.0.0/8", "fd00::1"], remoteIpBlocks: ["::ffff:10.1.0.0/112"] } }],
       to: [{ operation: { paths: ["/api*", "*.css", "/exact"], ports: ["8080"] } }],
       when: [{ key: "request.auth.claims[org][team]", values: [pay] }, { key: "destination.port", notValues: ["81"] }, { key: "remote.ip", values: ["192.168.0.0/16"] }] }`,
    'AUDIT',
  );
  if (!r.ok) return t.fail(r.error.join('\n'));
  const p = r.value.policies[0]!;
  t.is(p.action, 'AUDIT');
  const src = p.rules[0]!.from[0]!;
  t.deepEqual(src.requestPrincipals, ['https://idp/*']);
  t.deepEqual(
    [...(src.ipBlocks ?? []), ...(src.remoteIpBlocks ?? [])].map((c) => `${c.v4 ? 4 : 6}/${c.bits}`),
    ['4/8', '6/128', '4/16'],
    'one IP parser: a v4-mapped block is the v4 block',
  );
  t.deepEqual(p.rules[0]!.to[0]!.ports, [8080]);
  t.like(p.rules[0]!.when[0], { attr: { kind: 'claim', path: ['org', 'team'] }, values: ['pay'] });
  t.like(p.rules[0]!.when[1], { attr: { kind: 'destinationPort' }, notValues: ['81'] });
  t.is(p.rules[0]!.when[2]!.cidrs?.length, 1);
  const refused = (rules: string) => {
    const x = policy(rules);
    return x.ok ? '' : x.error.join('\n');
  };
  t.regex(refused('{ to: [{ operation: { paths: ["/a/{*}/b"] } }] }'), /path templates/);
  t.regex(refused('{ to: [{ operation: { paths: ["/a*b"] } }] }'), /a \* other than at the start or the end/);
  t.regex(refused('{ to: [{ operation: { paths: ["admin"] } }] }'), /a path starts with \//);
  t.regex(refused('{ from: [{ source: { ipBlocks: ["10.0.0.0/33"] } }] }'), /prefix length 33 exceeds 32/);
  t.regex(refused('{ from: [{ source: { serviceAccounts: ["a"] } }] }'), /serviceAccounts: unknown field/);
  t.regex(
    refused('{ when: [{ key: "destination.port", values: ["http"] }] }'),
    /values\[0\]: must be an integer/,
  );
  t.regex(refused('{ when: [{ key: "request.auth.claims[]", values: [x] }] }'), /is not supported/);
});

test('HTTPRoute filters, queryParams and timeouts parse; what Gateway API forbids is refused with its path', (t) => {
  const good = parseWaypointConfig(
    `${BASE}
httpRoutes:
  - name: r
    parentRefs: [{ name: server }]
    rules:
      - matches: [{ path: { type: PathPrefix, value: /a }, queryParams: [{ name: animal, value: whale }] }]
        filters:
          - { type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: X-Set, value: v }], add: [{ name: X-Add, value: a }], remove: [X-Gone] } }
          - { type: ResponseHeaderModifier, responseHeaderModifier: { add: [{ name: X-Resp, value: r }] } }
          - { type: URLRewrite, urlRewrite: { hostname: other.example, path: { type: ReplacePrefixMatch, replacePrefixMatch: /b } } }
          - { type: RequestMirror, requestMirror: { backendRef: { name: server, port: 80 }, fraction: { numerator: 1, denominator: 4 } } }
        backendRefs: [{ name: server, filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: X-B, value: b }] } }] }]
        timeouts: { request: 2s, backendRequest: 500ms }
      - matches: [{ path: { type: Exact, value: /old } }]
        filters: [{ type: RequestRedirect, requestRedirect: { scheme: https, hostname: example.org, port: 8443, statusCode: 301, path: { type: ReplaceFullPath, replaceFullPath: /new } } }]
`,
    't',
  );
  if (!good.ok) return t.fail(good.error.join('\n'));
  const [rule, redirect] = good.value.routes[0]!.rules;
  t.deepEqual(rule!.matches[0]!.queryParams, [{ type: 'Exact', name: 'animal', value: 'whale' }]);
  t.deepEqual(rule!.filters?.requestHeaders, {
    set: [['x-set', 'v']],
    add: [['x-add', 'a']],
    remove: ['x-gone'],
  });
  t.deepEqual(rule!.filters?.rewrite, {
    hostname: 'other.example',
    path: { type: 'ReplacePrefixMatch', value: '/b' },
  });
  t.deepEqual(rule!.filters?.mirrors, [
    { backend: { name: 'server', namespace: 'team-b', port: 80 }, percent: 25 },
  ]);
  t.deepEqual(rule!.backendRefs[0]!.filters?.requestHeaders?.set, [['x-b', 'b']]);
  t.deepEqual(rule!.timeouts, { requestMs: 2000, backendRequestMs: 500 });
  t.deepEqual(redirect!.filters?.redirect, {
    statusCode: 301,
    scheme: 'https',
    hostname: 'example.org',
    port: 8443,
    path: { type: 'ReplaceFullPath', value: '/new' },
  });

  const dated = parseWaypointConfig(
    `${BASE}
httpRoutes:
  - { name: r, creationTimestamp: "2026-12-05T07:00:00Z", parentRefs: [{ name: server }], rules: [] }
  - { name: s, creationTimestamp: yesterday, parentRefs: [{ name: server }], rules: [] }
`,
    't',
  );
  t.deepEqual(dated.ok ? [] : dated.error, ['t: httpRoutes[1].creationTimestamp: must be an RFC 3339 time']);

  const bad = parseWaypointConfig(
    `${BASE}
httpRoutes:
  - name: r
    parentRefs: [{ name: server }]
    rules:
      - matches: [{ path: { type: Exact, value: /a } }]
        filters:
          - { type: RequestRedirect, requestRedirect: { statusCode: 305, path: { type: ReplacePrefixMatch, replacePrefixMatch: /x } } }
          - { type: URLRewrite, urlRewrite: { hostname: "Bad_Host" } }
          - { type: ExtensionRef, extensionRef: { name: x } }
          - { type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: Host, value: h }, { name: x-a, value: "a\\nb" }], remove: [Transfer-Encoding] } }
          - { type: RequestHeaderModifier, requestHeaderModifier: {} }
          - { type: RequestMirror, requestMirror: { backendRef: { name: server }, percent: 5, fraction: { numerator: 1 } } }
        backendRefs: [{ name: server, filters: [{ type: URLRewrite, urlRewrite: {} }] }]
        timeouts: { request: 1s, backendRequest: 2s }
      - matches: [{ queryParams: [{ name: a, value: "1" }, { name: a, value: "2" }, { name: b, type: RegularExpression, value: "(" }] }]
`,
    't',
  );
  if (bad.ok) return t.fail('refused config accepted');
  const text = bad.error.join('\n');
  for (const want of [
    'rules[0].filters[0].requestRedirect.statusCode: must be one of 301, 302, 303, 307, 308',
    'rules[0].filters[0].requestRedirect.path.type: ReplacePrefixMatch needs the rule to have exactly one PathPrefix match',
    'rules[0].filters[1].urlRewrite.hostname: must be a lower-case RFC 1123 hostname',
    'rules[0].filters[2].type: unsupported filter type ExtensionRef',
    'rules[0].filters[3].requestHeaderModifier.set[0].name: Host cannot be modified',
    'rules[0].filters[3].requestHeaderModifier.set[1].value: may not hold CR, LF or NUL',
    'rules[0].filters[3].requestHeaderModifier.remove[0]: Transfer-Encoding is a framing or hop-by-hop header',
    'rules[0].filters[4].type: RequestHeaderModifier may appear only once',
    'rules[0].filters[5].requestMirror: percent and fraction are exclusive',
    'rules[0].filters: RequestRedirect and URLRewrite cannot both be set on one rule',
    'rules[0].filters: RequestRedirect filter must not be used together with backendRefs',
    'rules[0].backendRefs[0].filters[0].type: URLRewrite is not allowed here',
    'rules[0].timeouts.backendRequest: backendRequest timeout cannot be longer than request timeout',
    'rules[1].matches[0].queryParams[1].name: a is matched twice',
    'rules[1].matches[0].queryParams[2].value: invalid regex',
  ])
    t.true(text.includes(want), `missing: ${want}\n${text}`);
});
