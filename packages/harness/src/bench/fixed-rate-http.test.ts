import { createServer, type Server } from 'node:http';
import test from 'ava';
import { fixedRateHttp } from './fixed-rate-http.js';

/*
 * The waypoint harness's load generator leaves its warm-up out of the latencies: a proxy
 * that is slow only while it starts (a fresh V8 compiling its data path) must not set the
 * p99, and one that stays slow must.
 */

const HOST = '127.0.81.1';

/** Answers 1 KiB; for the first `slowMs` after its first request, each answer waits 300 ms. */
function server(port: number, slowMs: number): Promise<Server> {
  let first: number | undefined;
  const s = createServer((req, res) => {
    req.resume();
    first ??= Date.now();
    const wait = Date.now() - first < slowMs ? 300 : 0;
    setTimeout(() => res.end('x'.repeat(1024)), wait);
  });
  return new Promise((resolve) => s.listen(port, HOST, () => resolve(s)));
}

const load = { rate: 200, seconds: 1, connections: 64, cpu: '0-1' };

test('a slow start inside the warm-up is not counted; the same slow start without one sets the p99', async (t) => {
  const warm = await server(18_601, 400);
  const cold = await server(18_602, 400);
  try {
    let marked = 0;
    const [withWarmup, without] = await Promise.all([
      fixedRateHttp({ host: HOST, port: 18_601 }, { ...load, warmupSeconds: 1, onMeasuring: () => marked++ }),
      fixedRateHttp({ host: HOST, port: 18_602 }, { ...load, warmupSeconds: 0 }),
    ]);
    t.is(marked, 1);
    t.is(withWarmup.failed, 0);
    t.true(withWarmup.ok >= 190 && withWarmup.ok <= 201, `counted ${withWarmup.ok} of 200 scheduled`);
    t.true(withWarmup.p99_ms! < 200, `p99 ${withWarmup.p99_ms} ms after the warm-up`);
    t.true(without.p99_ms! >= 290, `p99 ${without.p99_ms} ms with the slow start counted`);
  } finally {
    warm.close();
    cold.close();
  }
});
