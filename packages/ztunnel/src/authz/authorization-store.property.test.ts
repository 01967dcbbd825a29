import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { BlockList, isIPv4 } from 'node:net';
import type { Address, Authorization, Match, ServiceAccountMatch, StringMatch } from '@zmesh/shared';
import test from 'ava';
import fc from 'fast-check';
import { AuthorizationStore, type AuthzDestination, type Decision } from './authorization-store.js';
import type { ConnectionAttributes } from './policy-match.js';

/**
 * A reference model: the semantics transcribed as literally as possible, with no index,
 * no compilation and Node's own BlockList for CIDRs. The store must agree with it.
 */
const ROOT = 'root';

function refApplicable(all: readonly Authorization[], dest: AuthzDestination) {
  const key = (p: Authorization) => `${p.namespace}/${p.name}`;
  const global = (p: Authorization) =>
    p.scope === 'GLOBAL' || (p.scope === 'NAMESPACE' && p.namespace === ROOT);
  const nsWide = (p: Authorization) =>
    p.scope === 'NAMESPACE' && p.namespace === dest.namespace && !global(p);
  const out = [...all.filter(nsWide), ...all.filter(global)];
  for (const name of dest.policyNames) {
    const p = all.find((x) => key(x) === name);
    if (p === undefined) return { missing: name, policies: out };
    if (!out.includes(p)) out.push(p);
  }
  return { policies: out };
}

function refDecide(policies: readonly Authorization[], c: ConnectionAttributes): Omit<Decision, 'dryRun'> {
  const key = (p: Authorization) => `${p.namespace}/${p.name}`;
  const enforced = policies.filter((p) => !p.dryRun);
  const deny = enforced.find((p) => p.action === 'DENY' && refPolicy(p, c));
  if (deny) return { allowed: false, policy: key(deny), reason: 'deny-matched' };
  const allows = enforced.filter((p) => p.action === 'ALLOW');
  if (allows.length === 0) return { allowed: true, reason: 'no-allow-policies' };
  const allow = allows.find((p) => refPolicy(p, c));
  if (allow) return { allowed: true, policy: key(allow), reason: 'allow-matched' };
  return { allowed: false, reason: 'allow-not-matched' };
}

function refEvaluate(
  all: readonly Authorization[],
  c: ConnectionAttributes,
  dest: AuthzDestination,
): Decision {
  const { policies, missing } = refApplicable(all, dest);
  if (missing !== undefined) return { allowed: false, policy: missing, reason: 'policy-pending', dryRun: [] };
  const base = refDecide(policies, c);
  const dryRun = policies
    .filter((p) => p.dryRun)
    .map((p) => {
      const promoted = policies.map((x) => (x === p ? { ...x, dryRun: false } : x));
      return {
        policy: `${p.namespace}/${p.name}`,
        wouldBe: refDecide(promoted, c).allowed ? 'allow' : 'deny',
      } as const;
    });
  return { ...base, dryRun };
}

function refPolicy(p: Authorization, c: ConnectionAttributes): boolean {
  return p.rules.some((r) =>
    r.clauses.every((cl) => cl.matches.length === 0 || cl.matches.some((m) => !isEmpty(m) && refMatch(m, c))),
  );
}

function isEmpty(m: Match): boolean {
  return Object.values(m).every((v) => (v as unknown[]).length === 0);
}

function refMatch(m: Match, c: ConnectionAttributes): boolean {
  const id = c.sourcePrincipal?.replace(/^spiffe:\/\//, '');
  const [, ns, sa] = id?.match(/^[^/]+\/ns\/([^/]+)\/sa\/([^/]+)$/) ?? [];
  const str = (s: StringMatch, v: string) =>
    'exact' in s
      ? v === s.exact
      : 'prefix' in s
        ? v.startsWith(s.prefix)
        : 'suffix' in s
          ? v.endsWith(s.suffix)
          : v !== '';
  const ip = (a: Address, v: string) => {
    const b = new BlockList();
    b.addSubnet(a.address, a.length, isIPv4(a.address) ? 'ipv4' : 'ipv6');
    return b.check(v, isIPv4(v) ? 'ipv4' : 'ipv6');
  };
  const saOk = (a: ServiceAccountMatch) => sa !== undefined && a.namespace === ns && a.serviceAccount === sa;
  const f = <T>(pos: readonly T[] | undefined, neg: readonly T[] | undefined, pred: (x: T) => boolean) =>
    (pos === undefined || pos.length === 0 || pos.some(pred)) && !(neg ?? []).some(pred);
  return (
    f(m.namespaces, m.notNamespaces, (s) => str(s, ns ?? '')) &&
    f(m.principals, m.notPrincipals, (s) => id !== undefined && str(s, id)) &&
    f(m.serviceAccounts, m.notServiceAccounts, saOk) &&
    f(m.sourceIps, m.notSourceIps, (a) => ip(a, c.sourceIp)) &&
    f(m.destinationIps, m.notDestinationIps, (a) => ip(a, c.destinationIp)) &&
    f(m.destinationPorts, m.notDestinationPorts, (p) => p === c.destinationPort)
  );
}

// Small pools, so that random policies and requests meet often.
const NS = ['a', 'b', ROOT];
const arbStringMatch = fc.oneof(
  fc.constantFrom('a', 'b', 'td/ns/a/sa/x', 'td/ns/b/sa/y').map((exact): StringMatch => ({ exact })),
  fc.constantFrom('td/ns/a', 'a', 'td/').map((prefix): StringMatch => ({ prefix })),
  fc.constantFrom('/sa/x', 'b', '/y').map((suffix): StringMatch => ({ suffix })),
  fc.constant<StringMatch>({ presence: {} }),
);
const arbSa = fc.record({ namespace: fc.constantFrom('a', 'b'), serviceAccount: fc.constantFrom('x', 'y') });
const arbCidr = fc.constantFrom<Address>(
  { address: '10.0.0.0', length: 8 },
  { address: '10.0.0.0', length: 24 },
  { address: '10.0.0.1', length: 32 },
  { address: '10.1.0.7', length: 16 },
  { address: '0.0.0.0', length: 0 },
  { address: 'fd00::', length: 16 },
  { address: 'fd00::1', length: 64 },
  { address: 'fd00:1::', length: 32 },
);
const arbPort = fc.constantFrom(80, 443, 8080);
/** A match constrains at most two fields (or none: the empty match), so matches stay likely. */
const FIELD_ARBS: Record<keyof Match, fc.Arbitrary<unknown>> = {
  namespaces: arbStringMatch,
  notNamespaces: arbStringMatch,
  serviceAccounts: arbSa,
  notServiceAccounts: arbSa,
  principals: arbStringMatch,
  notPrincipals: arbStringMatch,
  sourceIps: arbCidr,
  notSourceIps: arbCidr,
  destinationIps: arbCidr,
  notDestinationIps: arbCidr,
  destinationPorts: arbPort,
  notDestinationPorts: arbPort,
};
const arbMatch: fc.Arbitrary<Match> = fc
  .uniqueArray(fc.constantFrom(...(Object.keys(FIELD_ARBS) as (keyof Match)[])), { maxLength: 2 })
  .chain((fields) =>
    fc.record(
      Object.fromEntries(fields.map((f) => [f, fc.array(FIELD_ARBS[f], { minLength: 1, maxLength: 2 })])),
    ),
  ) as fc.Arbitrary<Match>;
const arbRule = fc
  .array(fc.array(arbMatch, { maxLength: 3 }), { maxLength: 3 })
  .map((cs) => ({ clauses: cs.map((matches) => ({ matches })) }));
const arbPolicy: fc.Arbitrary<Authorization> = fc.record({
  name: fc.constantFrom('p1', 'p2', 'p3', 'p4'),
  namespace: fc.constantFrom(...NS),
  scope: fc.constantFrom('GLOBAL', 'NAMESPACE', 'WORKLOAD_SELECTOR'),
  action: fc.constantFrom('ALLOW', 'DENY'),
  rules: fc.array(arbRule, { maxLength: 3 }),
  dryRun: fc.boolean(),
});
const arbPolicies = fc.uniqueArray(arbPolicy, { maxLength: 6, selector: (p) => `${p.namespace}/${p.name}` });
const arbConn: fc.Arbitrary<ConnectionAttributes> = fc
  .record({
    principal: fc.option(
      fc
        .tuple(fc.constantFrom('a', 'b'), fc.constantFrom('x', 'y'), fc.boolean())
        .map(([ns, sa, scheme]) => `${scheme ? 'spiffe://' : ''}td/ns/${ns}/sa/${sa}`),
      { nil: undefined },
    ),
    sourceIp: fc.constantFrom('10.0.0.1', '10.0.1.5', '10.1.0.1', 'fd00::1', 'fd00:1::2', '::ffff:10.0.0.1'),
    destinationIp: fc.constantFrom('10.0.0.9', '10.1.2.3', 'fd00::9', '::ffff:10.1.0.1'),
    destinationPort: arbPort,
  })
  .map(({ principal, ...rest }) =>
    principal === undefined ? rest : { ...rest, sourcePrincipal: principal },
  );
const arbNames = fc.subarray(
  NS.flatMap((ns) => ['p1', 'p2', 'p3', 'p4'].map((n) => `${ns}/${n}`)),
  { maxLength: 3 },
);
const arbDest = fc.record({ namespace: fc.constantFrom(...NS), policyNames: arbNames });

function storeOf(policies: readonly Authorization[]): AuthorizationStore {
  const store = new AuthorizationStore({ rootNamespace: ROOT });
  const r = store.apply(policies, []);
  if (!r.ok) throw new Error(r.error.join('; '));
  return store;
}

test('the indexed evaluator agrees with the reference model', (t) => {
  fc.assert(
    fc.property(arbPolicies, arbConn, arbDest, (policies, conn, dest) => {
      const got = storeOf(policies).evaluate(conn, dest);
      deepStrictEqual(got, refEvaluate(policies, conn, dest));
    }),
    { numRuns: 1500 },
  );
  t.pass();
});

test('the evaluator agrees with the reference model when every named policy exists', (t) => {
  const arb = arbPolicies.chain((policies) =>
    fc.tuple(
      fc.constant(policies),
      arbConn,
      fc.record({
        namespace: fc.constantFrom(...NS),
        policyNames: fc.subarray(policies.map((p) => `${p.namespace}/${p.name}`)),
      }),
    ),
  );
  fc.assert(
    fc.property(arb, ([policies, conn, dest]) => {
      deepStrictEqual(storeOf(policies).evaluate(conn, dest), refEvaluate(policies, conn, dest));
    }),
    { numRuns: 1000 },
  );
  t.pass();
});

test('dry-run policies never change a decision', (t) => {
  const enforced = arbPolicies.map((ps) => ps.map((p) => ({ ...p, dryRun: false, name: `e-${p.name}` })));
  const shadows = arbPolicies.map((ps) => ps.map((p) => ({ ...p, dryRun: true, name: `d-${p.name}` })));
  fc.assert(
    fc.property(enforced, shadows, arbConn, arbDest, (real, dry, conn, dest) => {
      const names = (ps: Authorization[]) => ps.map((p) => `${p.namespace}/${p.name}`);
      const withReal = { ...dest, policyNames: names(real) };
      const withBoth = { ...dest, policyNames: [...names(real), ...names(dry)] };
      const a = storeOf(real).evaluate(conn, withReal);
      const b = storeOf([...real, ...dry]).evaluate(conn, withBoth);
      deepStrictEqual({ ...b, dryRun: [] }, { ...a, dryRun: [] });
      const shadowsApplied = refApplicable([...real, ...dry], withBoth).policies.filter(
        (p) => p.dryRun,
      ).length;
      strictEqual(b.dryRun.length, b.reason === 'policy-pending' ? 0 : shadowsApplied);
    }),
    { numRuns: 700 },
  );
  t.pass();
});
