import test from 'ava';
import { parseLocalConfig } from './local-config.js';

test('a valid file yields workloads, services and forwards with defaults filled', (t) => {
  const r = parseLocalConfig(
    `
workloads:
  - { name: a, namespace: ns1, addresses: ["::ffff:127.0.1.1"], node: n1 }
services:
  - { name: s, namespace: ns1, addresses: [127.96.0.1], ports: [{ servicePort: 80 }] }
forwards:
  - { workload: Kubernetes//Pod/ns1/a, listen: "127.0.1.1:9000", destination: "[fd00::1]:80" }
`,
    'f.yaml',
  );
  if (!r.ok) return t.fail(r.error.join('\n'));
  const w = r.value.workloads[0]!;
  t.is(w.uid, 'Kubernetes//Pod/ns1/a');
  t.deepEqual(w.addresses, ['127.0.1.1'], 'IPv4-mapped folds to IPv4');
  t.is(w.serviceAccount, 'default');
  t.is(w.trustDomain, 'cluster.local');
  t.is(w.tunnelProtocol, 'HBONE');
  t.is(r.value.services[0]!.hostname, 's.ns1.svc.cluster.local');
  t.deepEqual(r.value.services[0]!.ports, [{ servicePort: 80, targetPort: 80 }]);
  t.deepEqual(r.value.forwards[0]!.destination, { host: 'fd00::1', port: 80 });
});

const invalid: Array<[string, string, RegExp]> = [
  ['YAML syntax', 'workloads: [', /f\.yaml: YAML/],
  ['top level not a mapping', '- 1', /\$: must be a mapping/],
  ['unknown top-level key', 'workload: []', /\$\.workload: unknown field/],
  [
    'bad address',
    'workloads: [{ name: a, namespace: b, node: n, addresses: [not-an-ip] }]',
    /workloads\[0\]\.addresses\[0\]: must be an IPv4/,
  ],
  [
    'bad namespace',
    'workloads: [{ name: a, namespace: B_C, node: n }]',
    /workloads\[0\]\.namespace: must match/,
  ],
  [
    'missing node',
    'workloads: [{ name: a, namespace: b }]',
    /workloads\[0\]\.node: must be a non-empty string/,
  ],
  [
    'bad port',
    'services: [{ name: s, namespace: b, ports: [{ servicePort: 70000 }] }]',
    /services\[0\]\.ports\[0\]\.servicePort: must be a port/,
  ],
  [
    'bad enum',
    'workloads: [{ name: a, namespace: b, node: n, tunnelProtocol: TLS }]',
    /tunnelProtocol: must be one of/,
  ],
  [
    'duplicate uid',
    'workloads: [{ name: a, namespace: b, node: n }, { name: a, namespace: b, node: m }]',
    /duplicate uid/,
  ],
  [
    'forward to unknown workload',
    'forwards: [{ workload: x, listen: "127.0.0.1:1", destination: "127.0.0.1:2" }]',
    /no workload with uid x/,
  ],
  [
    'forward with hostname',
    'workloads: [{ name: a, namespace: b, node: n }]\nforwards: [{ workload: Kubernetes//Pod/b/a, listen: "localhost:1", destination: "127.0.0.1:2" }]',
    /listen: must be ip:port/,
  ],
];

for (const [name, text, reason] of invalid) {
  test(`refused with file, path and reason: ${name}`, (t) => {
    const r = parseLocalConfig(text, 'f.yaml');
    t.false(r.ok);
    if (!r.ok)
      t.true(
        r.error.some((e) => reason.test(e)),
        r.error.join('\n'),
      );
  });
}

test('every problem is reported, not only the first', (t) => {
  const r = parseLocalConfig('workloads: [{ name: A, namespace: B, addresses: [x] }]', 'f.yaml');
  t.false(r.ok);
  if (!r.ok) t.true(r.error.length >= 4, r.error.join('\n'));
});

test('services and workloads may name their waypoint by address or by hostname', (t) => {
  const r = parseLocalConfig(
    `
workloads:
  - { name: w, namespace: ns, addresses: [10.0.0.1], node: n, waypoint: { hostname: { namespace: ns, hostname: wp.ns.svc.cluster.local } } }
services:
  - { name: s, namespace: ns, addresses: [10.96.0.1], ports: [{ servicePort: 80 }], waypoint: { address: 10.0.0.9 } }
`,
    'test',
  );
  if (!r.ok) return t.fail(r.error.join('\n'));
  t.deepEqual(r.value.services[0]!.waypoint, {
    address: { network: '', address: '10.0.0.9' },
    hbonePort: 15008,
  });
  t.deepEqual(r.value.workloads[0]!.waypoint, {
    hostname: { namespace: 'ns', hostname: 'wp.ns.svc.cluster.local' },
    hbonePort: 15008,
  });
  const bad = parseLocalConfig(
    'services: [{ name: s, namespace: ns, waypoint: { address: nope, port: 1 } }]',
    'test',
  );
  t.false(bad.ok);
  if (!bad.ok) t.true(bad.error.some((e) => e.includes('services[0].waypoint.address')));
});
