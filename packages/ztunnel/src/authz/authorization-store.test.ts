import type { Authorization } from '@zmesh/shared';
import test from 'ava';
import { AuthorizationStore, decisionError } from './authorization-store.js';

const conn = {
  sourcePrincipal: 'spiffe://cluster.local/ns/web/sa/front',
  sourceIp: '10.0.0.1',
  destinationIp: '10.0.0.2',
  destinationPort: 8080,
};
const dest = { namespace: 'shop', policyNames: [] as string[] };

function deny(name: string, extra: Partial<Authorization> = {}): Authorization {
  return {
    name,
    namespace: 'shop',
    scope: 'NAMESPACE',
    action: 'DENY',
    rules: [{ clauses: [] }],
    dryRun: false,
    ...extra,
  };
}

test('apply is all-or-nothing and reports every invalid upsert', (t) => {
  const store = new AuthorizationStore();
  t.deepEqual(store.apply([deny('a')]), { ok: true, value: 1 });
  const bad = store.apply(
    [
      deny('b'),
      { ...deny('c'), action: 'REJECT' },
      { ...deny('d'), rules: [{ clauses: [{ matches: [{ destinationPorts: [0] }] }] }] },
    ],
    ['shop/a'],
  );
  t.false(bad.ok);
  if (!bad.ok) {
    t.deepEqual(bad.error, [
      'upserts[1].action: must be one of ALLOW, DENY, got "REJECT"',
      'upserts[2].rules[0].clauses[0].matches[0].destinationPorts[0]: port must be an integer in 1..65535, got 0',
    ]);
  }
  t.is(store.version, 1);
  t.deepEqual(
    store.list().map((p) => p.name),
    ['a'],
  );
  t.like(store.evaluate(conn, dest), { allowed: false, policy: 'shop/a' });
});

test('duplicate keys and upsert+remove of one key are rejected', (t) => {
  const store = new AuthorizationStore();
  const r = store.apply([deny('a'), deny('a')], ['shop/a']);
  t.false(r.ok);
  if (!r.ok) t.is(r.error.length, 2);
});

test('version moves only on change; removals of unknown keys are harmless', (t) => {
  const store = new AuthorizationStore();
  t.deepEqual(store.apply([], ['shop/none']), { ok: true, value: 0 });
  store.apply([deny('a')]);
  store.apply([deny('a', { action: 'ALLOW' })]);
  t.is(store.version, 2);
  t.is(store.get('shop/a')?.action, 'ALLOW');
  store.apply([], ['shop/a']);
  t.is(store.version, 3);
  t.is(store.size, 0);
  t.like(store.evaluate(conn, dest), { allowed: true, reason: 'no-allow-policies' });
});

test('an upsert that changes scope moves the policy between indexes', (t) => {
  const store = new AuthorizationStore();
  store.apply([deny('a')]);
  t.false(store.evaluate(conn, dest).allowed);
  store.apply([deny('a', { scope: 'WORKLOAD_SELECTOR' })]);
  t.true(store.evaluate(conn, dest).allowed);
  t.false(store.evaluate(conn, { namespace: 'shop', policyNames: ['shop/a'] }).allowed);
  store.apply([deny('a', { scope: 'GLOBAL' })]);
  t.false(store.evaluate(conn, { namespace: 'elsewhere', policyNames: [] }).allowed);
});

test('a policy named twice (by bucket and by name) is evaluated once', (t) => {
  const store = new AuthorizationStore();
  store.apply([deny('a', { dryRun: true })]);
  const d = store.evaluate(conn, { namespace: 'shop', policyNames: ['shop/a'] });
  t.deepEqual(d.dryRun, [{ policy: 'shop/a', wouldBe: 'deny' }]);
});

test('dry-run verdicts say what enforcing that one policy would do', (t) => {
  const store = new AuthorizationStore();
  const onlyBatch: Authorization = {
    ...deny('only-batch', { action: 'ALLOW', dryRun: true }),
    rules: [{ clauses: [{ matches: [{ namespaces: [{ exact: 'batch' }] }] }] }],
  };
  store.apply([onlyBatch, deny('deny-all', { dryRun: true })]);
  t.deepEqual(store.evaluate(conn, dest), {
    allowed: true,
    reason: 'no-allow-policies',
    dryRun: [
      { policy: 'shop/only-batch', wouldBe: 'deny' },
      { policy: 'shop/deny-all', wouldBe: 'deny' },
    ],
  });
});

test('unparsable addresses fail closed', (t) => {
  const store = new AuthorizationStore();
  t.like(store.evaluate({ ...conn, sourceIp: 'not-an-ip' }, dest), {
    allowed: false,
    reason: 'invalid-request',
  });
});

test('principal with or without scheme, namespace and service account from it', (t) => {
  const store = new AuthorizationStore();
  store.apply([
    {
      ...deny('sa', { action: 'ALLOW' }),
      rules: [
        { clauses: [{ matches: [{ serviceAccounts: [{ namespace: 'web', serviceAccount: 'front' }] }] }] },
      ],
    },
  ]);
  t.true(store.evaluate(conn, dest).allowed);
  t.true(store.evaluate({ ...conn, sourcePrincipal: 'cluster.local/ns/web/sa/front' }, dest).allowed);
  t.false(store.evaluate({ ...conn, sourcePrincipal: 'cluster.local/ns/web/sa/back' }, dest).allowed);
  const { sourcePrincipal: _, ...plain } = conn;
  t.false(store.evaluate(plain, dest).allowed);
  t.true(
    store.evaluate({ ...conn, sourceNamespace: 'web', sourceServiceAccount: 'back' }, dest).allowed,
    'identity wins',
  );
  t.true(store.evaluate({ ...plain, sourceNamespace: 'web', sourceServiceAccount: 'front' }, dest).allowed);
});

test('hasEnforcedPolicy: staleness applies only where an enforced policy applies or one is missing', (t) => {
  const store = new AuthorizationStore();
  store.apply([deny('dry', { dryRun: true }), deny('sel', { scope: 'WORKLOAD_SELECTOR' })]);
  t.false(store.hasEnforcedPolicy(dest));
  t.true(store.hasEnforcedPolicy({ namespace: 'shop', policyNames: ['shop/sel'] }));
  t.true(store.hasEnforcedPolicy({ namespace: 'other', policyNames: ['other/missing'] }));
});

test('decisionError maps a denial to ZM_ERR_AUTHZ_DENIED (401)', (t) => {
  const store = new AuthorizationStore();
  store.apply([deny('a')]);
  const e = decisionError(store.evaluate(conn, dest));
  t.is(e?.code, 'ZM_ERR_AUTHZ_DENIED');
  t.is(e?.status, 401);
  t.is(e?.message, 'denied by policy shop/a');
  t.is(decisionError({ allowed: true, reason: 'no-allow-policies', dryRun: [] }), undefined);
});

test('applicable lists what evaluate looks at, with why: global, namespace, selected once, pending', (t) => {
  const store = new AuthorizationStore();
  store.apply([
    deny('ns-wide'),
    deny('root', { namespace: 'istio-system' }),
    deny('mesh', { namespace: 'other', scope: 'GLOBAL' }),
    deny('picked', { scope: 'WORKLOAD_SELECTOR' }),
    deny('elsewhere', { namespace: 'other' }),
  ]);
  t.deepEqual(
    store
      .applicable({ namespace: 'shop', policyNames: ['shop/picked', 'shop/ns-wide', 'shop/missing'] })
      .map((a) => [a.key, a.why]),
    [
      ['istio-system/root', 'global'],
      ['other/mesh', 'global'],
      ['shop/ns-wide', 'namespace'],
      ['shop/picked', 'selected'],
      ['shop/missing', 'pending'],
    ],
  );
});
