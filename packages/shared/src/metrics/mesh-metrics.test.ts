import test from 'ava';
import { MeshMetrics } from './mesh-metrics.js';

test('default metrics leave out the ones that walk every handle on each scrape', async (t) => {
  const text = await new MeshMetrics({ defaultMetrics: true }).registry.metrics();
  t.regex(text, /^process_cpu_seconds_total /m);
  t.regex(text, /^nodejs_eventloop_lag_seconds /m);
  if (process.platform === 'linux') t.regex(text, /^process_open_fds /m);
  t.notRegex(text, /^nodejs_active_(handles|resources|requests)/m);
  t.regex(text, /^# TYPE istio_tcp_connections_opened_total counter/m);
});
