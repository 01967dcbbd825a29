import { type Authorization, type ConvertedPolicy, convertAuthorizationPolicy } from '@zmesh/shared';
import test from 'ava';
import { parse } from 'yaml';
import { AuthorizationStore } from './authorization-store.js';

/** AuthorizationPolicy CRDs converted by shared's converter, then decided by ztunnel's store. */
function policy(spec: string, meta = 'name: p\n  namespace: shop'): unknown {
  return parse(
    `apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  ${meta}\nspec:\n${spec}`,
  );
}

function ztunnel(input: unknown): { a: Authorization; warnings: readonly string[]; c: ConvertedPolicy } {
  const r = convertAuthorizationPolicy(input);
  if (!r.ok) throw new Error(r.error.join('\n'));
  if (r.value.target !== 'ztunnel') throw new Error('expected a ztunnel policy');
  return { a: r.value.authorization, warnings: r.value.warnings, c: r.value };
}

test('ALLOW with only L7 rules keeps no rule and so denies everything it selects (fail closed)', (t) => {
  const { a, warnings } = ztunnel(
    policy(`  rules:
  - from: [{source: {requestPrincipals: ["issuer/sub"]}}]
  - to: [{operation: {paths: ["/admin"]}}]
    when: [{key: "request.headers[x-user]", values: ["a"]}]`),
  );
  t.deepEqual(a.rules, []);
  t.regex(warnings[0]!, /found: paths, request\.headers\[x-user\], requestPrincipals\)/);
  t.regex(warnings[0]!, /denies every connection/);
  const store = new AuthorizationStore();
  t.true(store.apply([a]).ok);
  const d = store.evaluate(
    {
      sourcePrincipal: 'spiffe://td/ns/web/sa/x',
      sourceIp: '10.0.0.1',
      destinationIp: '10.0.0.2',
      destinationPort: 80,
    },
    { namespace: 'shop', policyNames: [] },
  );
  t.like(d, { allowed: false, reason: 'allow-not-matched' });
});

test('DENY whose entries are L7-only matches everything, not nothing (unlike an empty Match)', (t) => {
  const { a, warnings } = ztunnel(
    policy(`  action: DENY
  rules:
  - to: [{operation: {methods: ["POST"]}}]
    from: [{source: {remoteIpBlocks: ["1.2.3.4"]}}, {source: {namespaces: ["x"]}}]
    when: [{key: request.auth.presenter, values: ["p"]}]`),
  );
  t.deepEqual(a.rules, [{ clauses: [] }]);
  t.regex(warnings[0]!, /DENY policy with HTTP attributes is enforced without the HTTP rules/);
  const store = new AuthorizationStore();
  store.apply([a]);
  const d = store.evaluate(
    {
      sourcePrincipal: 'spiffe://td/ns/web/sa/x',
      sourceIp: '10.0.0.1',
      destinationIp: '10.0.0.2',
      destinationPort: 80,
    },
    { namespace: 'shop', policyNames: [] },
  );
  t.like(d, { allowed: false, reason: 'deny-matched', policy: 'shop/p' });
});
