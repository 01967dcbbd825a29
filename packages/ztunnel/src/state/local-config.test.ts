import test from 'ava';
import { parseLocalConfig } from './local-config.js';

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
