import test from 'ava';
import { compile } from './compiler.js';
import { ConfigStore } from './config-store.js';
import { NAMESPACE_YAML, podYaml } from './testing/fixtures.js';

const STRICT = 'istio-system/istio_converted_static_strict';

function pa(name: string, ns: string, spec: string): string {
  return `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: ${name}, namespace: ${ns} }
spec: ${spec}
`;
}

function compiled(...docs: string[]) {
  const store = new ConfigStore();
  const applied = store.applyYaml(
    [NAMESPACE_YAML, podYaml('a', '10.1.0.1'), podYaml('b', '10.1.0.2'), ...docs].join('---\n'),
  );
  if (!applied.ok) throw new Error(applied.error.join('\n'));
  const out = compile(applied.value, { trustDomain: 'cluster.local' });
  const keys = (name: string) => out.workloads.find((w) => w.name === name)?.authorizationPolicies;
  return { out, keys, policy: (name: string) => out.authorizations.find((a) => a.name === name) };
}

function refused(doc: string): string[] {
  const r = new ConfigStore().applyYaml(doc);
  return r.ok ? [] : r.error;
}

test('no PeerAuthentication: every ambient workload names the static STRICT policy, a DENY of no identity', (t) => {
  const { keys, policy } = compiled();
  t.deepEqual(keys('a'), [STRICT]);
  t.deepEqual(policy('istio_converted_static_strict'), {
    name: 'istio_converted_static_strict',
    namespace: 'istio-system',
    scope: 'WORKLOAD_SELECTOR',
    action: 'DENY',
    rules: [{ clauses: [{ matches: [{ notPrincipals: [{ presence: {} }] }] }] }],
    dryRun: false,
  });
});

test('PERMISSIVE mesh-wide, per namespace or per workload drops the STRICT reference; precedence workload > namespace > mesh', (t) => {
  const mesh = pa('default', 'istio-system', '{ mtls: { mode: PERMISSIVE } }');
  t.deepEqual(compiled(mesh).keys('a'), []);
  const nsStrict = pa('ns', 'ns1', '{ mtls: { mode: STRICT } }');
  t.deepEqual(compiled(mesh, nsStrict).keys('a'), [STRICT], 'namespace STRICT over mesh PERMISSIVE');
  const wlPermissive = pa(
    'wl',
    'ns1',
    '{ selector: { matchLabels: { app: a } }, mtls: { mode: PERMISSIVE } }',
  );
  const c = compiled(mesh, nsStrict, wlPermissive);
  t.deepEqual(c.keys('a'), [], 'workload PERMISSIVE over namespace STRICT');
  t.deepEqual(c.keys('b'), [STRICT], 'the selector picks a only');
  const wlUnset = pa('wl', 'ns1', '{ selector: { matchLabels: { app: a } } }');
  t.deepEqual(compiled(mesh, wlUnset).keys('a'), [], 'UNSET inherits the mesh');
  t.deepEqual(
    compiled(pa('ns', 'ns1', '{ mtls: { mode: DISABLE } }')).keys('a'),
    [],
    'DISABLE is PERMISSIVE in ambient',
  );
  const wlStrict = pa('wl', 'ns1', '{ selector: { matchLabels: { app: a } }, mtls: { mode: STRICT } }');
  t.deepEqual(compiled(mesh, wlStrict).keys('a'), [STRICT], 'workload STRICT over mesh PERMISSIVE');
});

test('a STRICT workload with PERMISSIVE ports becomes its own DENY: no identity and none of those ports', (t) => {
  const wl = pa(
    'wl',
    'ns1',
    '{ selector: { matchLabels: { app: a } }, mtls: { mode: STRICT }, portLevelMtls: { "9090": { mode: PERMISSIVE }, "8080": { mode: DISABLE }, "7070": { mode: STRICT } } }',
  );
  const { keys, policy, out } = compiled(wl);
  t.deepEqual(keys('a'), ['ns1/converted_peer_authentication_wl'], 'the static STRICT policy is folded in');
  t.deepEqual(keys('b'), [STRICT]);
  t.deepEqual(policy('converted_peer_authentication_wl'), {
    name: 'converted_peer_authentication_wl',
    namespace: 'ns1',
    scope: 'WORKLOAD_SELECTOR',
    action: 'DENY',
    rules: [
      {
        clauses: [
          { matches: [{ notDestinationPorts: [8080] }] },
          { matches: [{ notDestinationPorts: [9090] }] },
          { matches: [{ notPrincipals: [{ presence: {} }] }] },
        ],
      },
    ],
    dryRun: false,
  });
  t.is(
    out.authorizations.filter((a) => a.name.includes('converted')).length,
    2,
    'static STRICT and the workload policy',
  );
});

test('a PERMISSIVE workload (inherited) with a STRICT port denies no identity on that port only', (t) => {
  const mesh = pa('default', 'istio-system', '{ mtls: { mode: PERMISSIVE } }');
  const wl = pa(
    'wl',
    'ns1',
    '{ selector: { matchLabels: { app: a } }, portLevelMtls: { "8080": { mode: STRICT } } }',
  );
  const { keys, policy } = compiled(mesh, wl);
  t.deepEqual(keys('a'), ['ns1/converted_peer_authentication_wl']);
  t.deepEqual(keys('b'), []);
  t.deepEqual(policy('converted_peer_authentication_wl')?.rules, [
    { clauses: [{ matches: [{ notPrincipals: [{ presence: {} }], destinationPorts: [8080] }] }] },
  ]);
});

test('port overrides equal to the base change nothing: the workload names the static policy', (t) => {
  const wl = pa(
    'wl',
    'ns1',
    '{ selector: { matchLabels: { app: a } }, portLevelMtls: { "8080": { mode: STRICT } } }',
  );
  const { keys, policy } = compiled(wl);
  t.deepEqual(keys('a'), [STRICT]);
  t.is(policy('converted_peer_authentication_wl'), undefined);
});

test('two workload policies selecting one pod: the first by name wins, deterministically', (t) => {
  const x = pa('x', 'ns1', '{ selector: { matchLabels: { app: a } }, mtls: { mode: STRICT } }');
  const y = pa('y', 'ns1', '{ selector: { matchLabels: { app: a } }, mtls: { mode: PERMISSIVE } }');
  t.deepEqual(compiled(y, x).keys('a'), [STRICT]);
});

test('an invalid PeerAuthentication is refused with its reason', (t) => {
  const cases: Array<[string, RegExp]> = [
    [
      '{ mtls: { mode: LOOSE } }',
      /spec\.mtls\.mode: "LOOSE" is not one of UNSET, STRICT, PERMISSIVE, DISABLE/,
    ],
    ['{ mtls: STRICT }', /spec\.mtls: not a mapping/],
    ['{ selector: { matchLabels: {} } }', /spec\.selector\.matchLabels: must name at least one label/],
    ['{ selector: { matchLabels: { app: 3 } } }', /spec\.selector\.matchLabels\.app: not a string/],
    ['{ selector: { matchLabels: { "bad key!": x } } }', /"bad key!" is not a label key/],
    ['{ selector: [] }', /spec\.selector: not a mapping/],
    [
      '{ selector: { matchLabels: { app: a } }, portLevelMtls: { "70000": { mode: STRICT } } }',
      /spec\.portLevelMtls\.70000: "70000" is not a port in 1\.\.65535/,
    ],
    [
      '{ selector: { matchLabels: { app: a } }, portLevelMtls: { "0": { mode: STRICT } } }',
      /"0" is not a port/,
    ],
    [
      '{ selector: { matchLabels: { app: a } }, portLevelMtls: { http: { mode: STRICT } } }',
      /"http" is not a port/,
    ],
    ['{ portLevelMtls: { "8080": { mode: STRICT } } }', /spec\.portLevelMtls: needs spec\.selector/],
    [
      '{ selector: { matchLabels: { app: a } }, portLevelMtls: { "8080": { mode: OFF } } }',
      /spec\.portLevelMtls\.8080\.mode: "OFF" is not one of/,
    ],
  ];
  for (const [spec, reason] of cases) {
    const reasons = refused(pa('bad', 'ns1', spec));
    t.true(
      reasons.some((r) => reason.test(r)),
      `${spec}: ${reasons.join('; ')}`,
    );
  }
});

test('a refused PeerAuthentication leaves the applied config as it was', (t) => {
  const store = new ConfigStore();
  const good = store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n'));
  if (!good.ok) return t.fail(good.error.join('; '));
  const bad = store.applyYaml(pa('bad', 'ns1', '{ mtls: { mode: LOOSE } }'), 'bad');
  t.false(bad.ok);
  t.is(store.view(), good.value);
});
