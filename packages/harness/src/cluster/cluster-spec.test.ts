import test from 'ava';
import { gridSpec, parseClusterSpec } from './cluster-spec.js';
import { buildTopology } from './topology.js';

test('a YAML spec decodes with defaults', (t) => {
  const r = parseClusterSpec('nodes: [node-a, node-b]\npods:\n  - { name: web, node: node-b }\n');
  t.deepEqual(r, {
    ok: true,
    value: {
      nodes: ['node-a', 'node-b'],
      pods: [{ name: 'web', namespace: 'default', serviceAccount: 'default', node: 'node-b' }],
    },
  });
});

test('a bad spec returns every reason and never throws', (t) => {
  const r = parseClusterSpec(
    'nodes: [A, node-a, node-a]\npods:\n  - { name: web, node: nowhere }\n  - { node: node-a }\n',
  );
  t.false(r.ok);
  const reasons = r.ok ? [] : r.error;
  t.true(reasons.some((x) => x.includes('bad name A')));
  t.true(reasons.some((x) => x.includes('duplicate')));
  t.true(reasons.some((x) => x.includes('unknown node nowhere')));
  t.true(reasons.some((x) => x.includes('pods[1].name')));
  t.false(parseClusterSpec(': : :').ok);
  t.false(parseClusterSpec('').ok);
});

test('topology: addresses, names and uids are derived from spec and run id', (t) => {
  const topo = buildTopology(gridSpec(2, 2), 'abc123', '/sys/fs/cgroup/unified');
  const b2 = topo.pods[3]!;
  t.like(b2, {
    name: 'pod-b2',
    node: 'node-b',
    ipv4: '10.244.2.3',
    ipv6: 'fd00:244:2::3',
    netns: 'zm-abc123-n2p2',
    linuxUid: 202002,
    cgroupPath: '/sys/fs/cgroup/unified/zm-abc123/kubepods/besteffort/podzm-abc123-default-pod-b2',
    uid: 'zm-abc123-default-pod-b2',
  });
  t.is(new Set(topo.pods.map((p) => p.linuxUid)).size, 4);
  t.like(topo.nodes[1], { gateway4: '10.244.2.1', fabric6: 'fd00:255::2', podCidr6: 'fd00:244:2::/64' });
});
