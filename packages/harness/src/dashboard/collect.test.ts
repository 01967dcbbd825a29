import test from 'ava';
import { collectMesh, parseMetrics } from './collect.js';

test('parseMetrics reads labels, escapes and values, and skips comments', (t) => {
  const samples = parseMetrics(
    [
      '# HELP istio_tcp_sent_bytes_total Bytes',
      '# TYPE istio_tcp_sent_bytes_total counter',
      'istio_tcp_sent_bytes_total{reporter="source",source_workload="a\\"b",destination_workload="web"} 1024',
      'zmesh_hbone_streams 3',
      'not a sample',
      '',
    ].join('\n'),
  );
  t.deepEqual(samples, [
    {
      name: 'istio_tcp_sent_bytes_total',
      labels: { reporter: 'source', source_workload: 'a"b', destination_workload: 'web' },
      value: 1024,
    },
    { name: 'zmesh_hbone_streams', labels: {}, value: 3 },
  ]);
});

test('an unreachable control plane and ztunnel are shown as such, not thrown', async (t) => {
  const view = await collectMesh({ admin: '/nonexistent/zmesh-admin.sock' }, ['127.61.255.254']);
  t.false(view.controlPlane.reachable);
  t.regex(view.controlPlane.error ?? '', /ZM_ERR_ADMIN_UNREACHABLE|nonexistent/);
  t.is(view.ztunnels.length, 1);
  t.false(view.ztunnels[0]?.reachable);
  t.deepEqual(view.tunnels, []);
});
