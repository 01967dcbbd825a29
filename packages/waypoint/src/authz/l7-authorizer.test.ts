import { parseCidr, parseIp } from '@zmesh/shared';
import test from 'ava';
import type {
  L7Policy,
  PolicyCondition,
  PolicyOperation,
  PolicyRule,
  PolicySource,
} from '../config/waypoint-config.js';
import type { RequestAuth } from './jwt-authenticator.js';
import { type AuthzContext, type AuthzMode, authorize, claimValues, stringMatch } from './l7-authorizer.js';

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

const cidr = (s: string) => {
  const c = parseCidr(s);
  if (typeof c === 'string') throw new Error(c);
  return c;
};
const ip = (s: string) => parseIp(s)!;
const policy = (action: L7Policy['action'], rule: Partial<PolicyRule>, name = 'p'): L7Policy => ({
  name,
  namespace: 'b',
  action,
  rules: [{ from: [], to: [], when: [], ...rule }],
});
const auth = (claims: Record<string, unknown>): RequestAuth => ({
  principal: `${claims.iss}/${claims.sub}`,
  claims,
  audiences: [],
  presenter: '',
});
const withAuth = (a: RequestAuth | undefined, path = '/'): AuthzContext => ({
  principal: CLIENT,
  port: 80,
  sourceIp: ip('10.1.2.3'),
  http: { method: 'GET', path, host: 'h', header: () => undefined, ...(a ? { auth: a } : {}) },
});
const alice = auth({ iss: 'https://idp', sub: 'alice', groups: ['dev', 'ops'], org: { team: 'pay', n: 7 } });

test('requestPrincipals: iss/sub with Istio * forms; no token is no principal', (t) => {
  const allow = (values: string[]) => [policy('ALLOW', { from: [{ requestPrincipals: values }] })];
  t.true(authorize(allow(['https://idp/alice']), withAuth(alice), 'http').allowed);
  t.true(authorize(allow(['https://idp/*']), withAuth(alice), 'http').allowed);
  t.true(authorize(allow(['*/alice']), withAuth(alice), 'http').allowed);
  t.true(authorize(allow(['*']), withAuth(alice), 'http').allowed);
  t.false(authorize(allow(['https://idp/bob']), withAuth(alice), 'http').allowed);
  t.false(authorize(allow(['*']), withAuth(undefined), 'http').allowed, 'a missing token has no principal');
  // Istio's "require a JWT": DENY notRequestPrincipals ["*"].
  const requireJwt = [policy('DENY', { from: [{ notRequestPrincipals: ['*'] }] })];
  t.false(authorize(requireJwt, withAuth(undefined), 'http').allowed);
  t.true(authorize(requireJwt, withAuth(alice), 'http').allowed);
  // Without HTTP the principal is unknown: an ALLOW on it cannot be decided at CONNECT time.
  t.true(authorize(allow(['*']), { principal: CLIENT, port: 80 }, 'tunnel').allowed);
  t.false(authorize(allow(['*']), { principal: CLIENT, port: 80 }, 'tcp').allowed);
});

const when = (
  key: string,
  attr: PolicyCondition['attr'],
  rest: Partial<PolicyCondition>,
): PolicyCondition => ({
  key,
  attr,
  ...rest,
});

test('when on claims (lists, nested, numbers), request.auth.principal, destination.port', (t) => {
  const allowIf = (c: PolicyCondition) => [policy('ALLOW', { when: [c] })];
  const claim = (path: string[], rest: Partial<PolicyCondition>) =>
    allowIf(when(`request.auth.claims[${path.join('][')}]`, { kind: 'claim', path }, rest));
  t.true(
    authorize(claim(['groups'], { values: ['ops'] }), withAuth(alice), 'http').allowed,
    'any list element',
  );
  t.false(authorize(claim(['groups'], { values: ['admin'] }), withAuth(alice), 'http').allowed);
  t.false(authorize(claim(['groups'], { notValues: ['dev'] }), withAuth(alice), 'http').allowed);
  t.true(authorize(claim(['org', 'team'], { values: ['pa*'] }), withAuth(alice), 'http').allowed, 'nested');
  t.true(
    authorize(claim(['org', 'n'], { values: ['7'] }), withAuth(alice), 'http').allowed,
    'a number as text',
  );
  t.false(authorize(claim(['org'], { values: ['*'] }), withAuth(alice), 'http').allowed, 'an object never');
  t.false(authorize(claim(['groups'], { values: ['*'] }), withAuth(undefined), 'http').allowed, 'no token');
  t.true(authorize(claim(['groups'], { notValues: ['ops'] }), withAuth(undefined), 'http').allowed);
  const principal = allowIf(
    when('request.auth.principal', { kind: 'requestPrincipal' }, { values: ['*/alice'] }),
  );
  t.true(authorize(principal, withAuth(alice), 'http').allowed);
  t.false(authorize(principal, withAuth(undefined), 'http').allowed);
  const port = allowIf(when('destination.port', { kind: 'destinationPort' }, { values: ['80'] }));
  t.true(authorize(port, withAuth(undefined), 'http').allowed);
  t.false(authorize(port, { ...withAuth(undefined), port: 8080 }, 'http').allowed);
  t.deepEqual(claimValues({ a: [1, 'x', { y: 1 }, true] }, ['a']), ['1', 'x', 'true']);
});

test('ipBlocks, remoteIpBlocks and source.ip / remote.ip conditions match CIDRs; an unknown address matches none', (t) => {
  const ctx = withAuth(undefined);
  const allowFrom = (s: PolicySource) => [policy('ALLOW', { from: [s] })];
  t.true(authorize(allowFrom({ ipBlocks: [cidr('10.1.0.0/16')] }), ctx, 'http').allowed);
  t.false(authorize(allowFrom({ ipBlocks: [cidr('10.2.0.0/16')] }), ctx, 'http').allowed);
  t.false(authorize(allowFrom({ notIpBlocks: [cidr('10.0.0.0/8')] }), ctx, 'http').allowed);
  t.true(authorize(allowFrom({ remoteIpBlocks: [cidr('10.1.2.3')] }), ctx, 'http').allowed);
  t.false(authorize(allowFrom({ notRemoteIpBlocks: [cidr('10.1.2.3')] }), ctx, 'http').allowed);
  const mapped = { ...ctx, sourceIp: ip('::ffff:10.1.2.3') };
  t.true(
    authorize(allowFrom({ ipBlocks: [cidr('10.1.0.0/16')] }), mapped, 'http').allowed,
    'v4-mapped is v4',
  );
  const { sourceIp: _, ...unknown } = ctx;
  t.false(authorize(allowFrom({ ipBlocks: [cidr('0.0.0.0/0')] }), unknown, 'http').allowed);
  const src = [
    policy('DENY', { when: [when('source.ip', { kind: 'sourceIp' }, { cidrs: [cidr('10.1.2.0/24')] })] }),
  ];
  t.false(authorize(src, ctx, 'http').allowed);
  t.false(authorize(src, ctx, 'tunnel').allowed, 'known at CONNECT time');
  const remote = [
    policy('ALLOW', { when: [when('remote.ip', { kind: 'remoteIp' }, { notCidrs: [cidr('10.9.0.0/16')] })] }),
  ];
  t.true(authorize(remote, ctx, 'http').allowed);
});

test('remote.ip is its own address when proxies are trusted; ipBlocks stay on the source; per-request is unknown at CONNECT', (t) => {
  const ctx = { ...withAuth(undefined), remoteIp: ip('203.0.113.7') };
  const allowFrom = (s: PolicySource) => [policy('ALLOW', { from: [s] })];
  t.true(authorize(allowFrom({ remoteIpBlocks: [cidr('203.0.113.0/24')] }), ctx, 'http').allowed);
  t.false(
    authorize(allowFrom({ remoteIpBlocks: [cidr('10.1.2.3')] }), ctx, 'http').allowed,
    'not the source',
  );
  t.true(authorize(allowFrom({ ipBlocks: [cidr('10.1.2.3')] }), ctx, 'http').allowed, 'ipBlocks: the source');
  t.false(authorize(allowFrom({ ipBlocks: [cidr('203.0.113.0/24')] }), ctx, 'http').allowed);
  const denyRemote = [
    policy('DENY', { when: [when('remote.ip', { kind: 'remoteIp' }, { cidrs: [cidr('203.0.113.0/24')] })] }),
  ];
  t.false(authorize(denyRemote, ctx, 'http').allowed);
  const atConnect = { ...withAuth(undefined), remoteIp: 'per-request' as const };
  t.true(authorize(denyRemote, atConnect, 'tunnel').allowed, 'a DENY on remote.ip waits for the request');
  t.true(
    authorize(allowFrom({ remoteIpBlocks: [cidr('203.0.113.0/24')] }), atConnect, 'tunnel').allowed,
    'an ALLOW on remote.ip may still match a request',
  );
  const denySource = [policy('DENY', { from: [{ ipBlocks: [cidr('10.1.2.3')] }] })];
  t.false(authorize(denySource, atConnect, 'tunnel').allowed, 'the source is still known at CONNECT');
});

test('hosts, ports and paths: exact, prefix, suffix on the normalized path', (t) => {
  const allowTo = (o: PolicyOperation) => [policy('ALLOW', { to: [o] })];
  const at = (path: string) => withAuth(undefined, path);
  t.true(authorize(allowTo({ paths: ['/admin'] }), at('/admin'), 'http').allowed);
  t.false(authorize(allowTo({ paths: ['/admin'] }), at('/admin/'), 'http').allowed);
  t.true(authorize(allowTo({ paths: ['/admin*'] }), at('/admin/x'), 'http').allowed);
  t.true(authorize(allowTo({ paths: ['*.css'] }), at('/a/b.css'), 'http').allowed);
  t.false(authorize(allowTo({ paths: ['*.css'] }), at('/a/b.js'), 'http').allowed);
  t.false(authorize(allowTo({ notPaths: ['/admin*'] }), at('/admin'), 'http').allowed);
  t.true(authorize(allowTo({ hosts: ['H'] }), at('/'), 'http').allowed, 'hosts ignore case');
  t.false(authorize(allowTo({ notHosts: ['h'] }), at('/'), 'http').allowed);
  t.true(authorize(allowTo({ ports: [80] }), at('/'), 'http').allowed);
  t.false(authorize(allowTo({ ports: [81] }), at('/'), 'http').allowed);
});

test('AUDIT never allows or denies; the first matching AUDIT policy is named', (t) => {
  const audit = policy('AUDIT', { to: [{ paths: ['/admin*'] }] }, 'audit-admin');
  t.deepEqual(authorize([audit], withAuth(undefined, '/admin'), 'http'), {
    allowed: true,
    audit: 'b/audit-admin',
  });
  t.deepEqual(authorize([audit], withAuth(undefined, '/x'), 'http'), { allowed: true });
  const deny = policy('DENY', { to: [{ paths: ['/admin*'] }] }, 'deny');
  t.deepEqual(authorize([audit, deny], withAuth(undefined, '/admin'), 'http'), {
    allowed: false,
    policy: 'b/deny',
    audit: 'b/audit-admin',
  });
  // An AUDIT alone is not an ALLOW-list: other requests are not denied.
  t.true(authorize([audit], withAuth(undefined, '/y'), 'http').allowed);
  t.deepEqual(
    authorize([audit], { principal: CLIENT, port: 80 }, 'tcp'),
    { allowed: true },
    'unknown: no mark',
  );
});
