import test from 'ava';
import type { L7Policy } from '../config/waypoint-config.js';
import { type AuthzContext, type AuthzMode, authorize, stringMatch } from './l7-authorizer.js';

const CLIENT = 'spiffe://cluster.local/ns/team-a/sa/client';
const OTHER = 'spiffe://cluster.local/ns/team-c/sa/other';

const http = (
  principal: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
): AuthzContext => ({
  principal,
  port: 80,
  http: { method, path, host: 'server.team-b:80', header: (n) => headers[n] },
});

const POLICIES: L7Policy[] = [
  {
    name: 'deny-delete',
    namespace: 'b',
    action: 'DENY',
    rules: [{ from: [], to: [{ methods: ['DELETE'] }], when: [] }],
  },
  {
    name: 'allow',
    namespace: 'b',
    action: 'ALLOW',
    rules: [
      {
        from: [{ namespaces: ['team-a'] }],
        to: [{ paths: ['/api/*', '/health'], hosts: ['server.team-b'] }],
        when: [],
      },
      {
        from: [{ principals: ['cluster.local/ns/team-c/*'] }],
        to: [{ notPaths: ['/admin*'] }],
        when: [{ key: 'request.headers[x-env]', attr: { kind: 'header', name: 'x-env' }, values: ['prod'] }],
      },
    ],
  },
];

test('HTTP decisions follow Istio: DENY first, then one ALLOW must match', (t) => {
  const table: Array<[AuthzContext, boolean]> = [
    [http(CLIENT, 'GET', '/api/x'), true],
    [http(CLIENT, 'GET', '/health'), true],
    [http(CLIENT, 'GET', '/healthz'), false],
    [http(CLIENT, 'DELETE', '/api/x'), false],
    [http(OTHER, 'GET', '/any', { 'x-env': 'prod' }), true],
    [http(OTHER, 'GET', '/any', { 'x-env': 'dev' }), false],
    [http(OTHER, 'GET', '/any'), false],
    [http(OTHER, 'GET', '/admin/x', { 'x-env': 'prod' }), false],
  ];
  for (const [ctx, allowed] of table)
    t.is(
      authorize(POLICIES, ctx, 'http').allowed,
      allowed,
      `${ctx.principal} ${ctx.http?.method} ${ctx.http?.path}`,
    );
  t.deepEqual(authorize(POLICIES, http(CLIENT, 'DELETE', '/'), 'http'), {
    allowed: false,
    policy: 'b/deny-delete',
  });
  t.true(authorize([], http(OTHER, 'POST', '/x'), 'http').allowed, 'no policies: allow');
});

test('without HTTP: tcp mode errs towards denying, tunnel mode refuses only certain denials', (t) => {
  const l4 = (principal: string, mode: AuthzMode) =>
    authorize(POLICIES, { principal, port: 80 }, mode).allowed;
  // tcp: the DENY with a method field is treated as matching; ALLOW rules with paths cannot match.
  t.false(l4(CLIENT, 'tcp'));
  // tunnel: some request from CLIENT could be allowed, so the CONNECT is accepted.
  t.true(l4(CLIENT, 'tunnel'));
  const onlyTeamA: L7Policy[] = [
    {
      name: 'a',
      namespace: 'b',
      action: 'ALLOW',
      rules: [{ from: [{ namespaces: ['team-a'] }], to: [], when: [] }],
    },
  ];
  t.false(
    authorize(onlyTeamA, { principal: OTHER, port: 80 }, 'tunnel').allowed,
    'no request from team-c could pass',
  );
  t.true(authorize(onlyTeamA, { principal: CLIENT, port: 80 }, 'tcp').allowed);
  const ports: L7Policy[] = [
    { name: 'p', namespace: 'b', action: 'DENY', rules: [{ from: [], to: [{ notPorts: [80] }], when: [] }] },
  ];
  t.true(authorize(ports, { principal: CLIENT, port: 80 }, 'tcp').allowed);
  t.false(authorize(ports, { principal: CLIENT, port: 81 }, 'tunnel').allowed);
});

test('policies that target a Service apply to that service only', (t) => {
  const p: L7Policy[] = [
    {
      name: 's',
      namespace: 'b',
      action: 'DENY',
      rules: [{ from: [], to: [], when: [] }],
      targetServices: ['b/one'],
    },
  ];
  t.false(authorize(p, { principal: CLIENT, port: 80, service: 'b/one' }, 'http').allowed);
  t.true(authorize(p, { principal: CLIENT, port: 80, service: 'b/two' }, 'http').allowed);
});

test('Istio string matching: exact, prefix*, *suffix, * presence', (t) => {
  t.true(stringMatch('abc', 'abc'));
  t.false(stringMatch('abc', 'abcd'));
  t.true(stringMatch('ab*', 'abcd'));
  t.true(stringMatch('*cd', 'abcd'));
  t.true(stringMatch('*', 'x'));
  t.false(stringMatch('*', ''));
});
