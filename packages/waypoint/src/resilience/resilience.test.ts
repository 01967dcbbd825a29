import test from 'ava';
import type { Endpoint } from '../config/config-view.js';
import { DEFAULT_OUTLIER, defaultBackendPolicy } from '../config/waypoint-config.js';
import { ManualClock } from '../testing/manual-clock.js';
import { BackendCluster } from './backend-cluster.js';
import { grpcTimeoutValue, incomingBudgetMs } from './deadline.js';
import { planFault } from './fault-injector.js';
import { OutlierDetector } from './outlier-detector.js';
import { TokenBucket } from './rate-limiter.js';
import { backoffMs, isIdempotent, RetryBudget } from './retry-budget.js';

const hosts = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `10.0.0.${i + 1}:80` }));

test('outlier: ejected at 5 consecutive 5xx, for 30 s × times ejected, readmitted at the next sweep', (t) => {
  const clock = new ManualClock();
  const events: string[] = [];
  const od = new OutlierDetector({ ...DEFAULT_OUTLIER, maxEjectionPercent: 50 }, clock, (h, e) =>
    events.push(`${h}:${e}`),
  );
  const all = hosts(4);
  const h = all[0]!.key;
  for (let i = 0; i < 4; i++) od.record(h, true, 4);
  od.record(h, false, 4);
  for (let i = 0; i < 4; i++) od.record(h, true, 4);
  t.false(od.isEjected(h), 'a success resets the count');
  od.record(h, true, 4);
  t.true(od.isEjected(h));
  t.is(od.available(all).length, 3);
  clock.advance(29_999);
  t.is(od.available(all).length, 3, 'still out before 30 s');
  clock.advance(10_001);
  t.is(od.available(all).length, 4, 'back after 30 s, at the sweep');
  for (let i = 0; i < 5; i++) od.record(h, true, 4);
  t.true(od.isEjected(h), 'second ejection');
  clock.advance(40_000);
  t.is(od.available(all).length, 3, 'second ejection lasts 60 s');
  clock.advance(30_000);
  t.is(od.available(all).length, 4);
  t.deepEqual(events, [`${h}:true`, `${h}:false`, `${h}:true`, `${h}:false`]);
});

test('outlier: ejection time is capped at maxEjection', (t) => {
  const clock = new ManualClock();
  const od = new OutlierDetector({ ...DEFAULT_OUTLIER, maxEjectionPercent: 100 }, clock);
  const all = hosts(3);
  for (let round = 0; round < 12; round++) {
    for (let i = 0; i < 5; i++) od.record(all[0]!.key, true, 3);
    clock.advance(300_000 + 10_000);
    t.is(od.available(all).length, 3, `round ${round}: out at most 300 s`);
  }
});

test('outlier: maxEjectionPercent caps ejections (at least one) and the last host is never ejected', (t) => {
  const clock = new ManualClock();
  const od = new OutlierDetector(DEFAULT_OUTLIER, clock);
  const all = hosts(4);
  for (const h of all) for (let i = 0; i < 5; i++) od.record(h.key, true, 4);
  t.is(od.available(all).length, 3, '10% of 4 rounds down to 0, but one may go');
  const pair = new OutlierDetector({ ...DEFAULT_OUTLIER, maxEjectionPercent: 100 }, clock);
  const two = hosts(2);
  for (const h of two) for (let i = 0; i < 5; i++) pair.record(h.key, true, 2);
  t.is(pair.available(two).length, 1, 'never the last host');
  const lone = new OutlierDetector({ ...DEFAULT_OUTLIER, maxEjectionPercent: 100 }, clock);
  for (let i = 0; i < 10; i++) lone.record('only', true, 1);
  t.false(lone.isEjected('only'));
});

test('retry budget: 20% of active requests, at least 3', (t) => {
  const b = new RetryBudget();
  for (let i = 0; i < 50; i++) b.requestStarted();
  let granted = 0;
  while (b.tryAcquire()) granted++;
  t.is(granted, 10);
  b.release();
  t.true(b.tryAcquire());
  const small = new RetryBudget();
  small.requestStarted();
  t.true(small.tryAcquire() && small.tryAcquire() && small.tryAcquire());
  t.false(small.tryAcquire(), 'minimum concurrency 3');
});

test('idempotent methods (RFC 9110 §9.2.2) and full-jitter backoff bounds', (t) => {
  t.true(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS'].every(isIdempotent));
  t.false(['POST', 'PATCH', 'CONNECT'].some(isIdempotent));
  t.is(
    backoffMs(0, 25, 250, () => 0.999),
    24,
  );
  t.is(
    backoffMs(5, 25, 250, () => 0.999),
    249,
  );
  t.is(
    backoffMs(3, 25, 250, () => 0),
    0,
  );
});

test('token bucket: burst of maxTokens, refills per interval, reports reset', (t) => {
  const clock = new ManualClock();
  const b = new TokenBucket({ maxTokens: 3, tokensPerFill: 1, fillIntervalMs: 1000 }, clock);
  t.deepEqual(
    [b.take(), b.take(), b.take()].map((d) => d.remaining),
    [2, 1, 0],
  );
  const denied = b.take();
  t.false(denied.allowed);
  t.is(denied.resetMs, 1000);
  clock.advance(1000);
  t.true(b.take().allowed);
  t.false(b.take().allowed);
  clock.advance(10_000);
  t.is(b.take().remaining, 2, 'refill is capped at maxTokens');
});

test('deadlines: grpc-timeout units and x-zmesh-deadline-ms, the smaller wins; malformed ignored', (t) => {
  const h = (headers: Record<string, string>) => incomingBudgetMs((n) => headers[n]);
  t.is(h({}), undefined);
  t.is(h({ 'grpc-timeout': '2S' }), 2000);
  t.is(h({ 'grpc-timeout': '1M' }), 60_000);
  t.is(h({ 'grpc-timeout': '500m', 'x-zmesh-deadline-ms': '300' }), 300);
  t.is(h({ 'x-zmesh-deadline-ms': '0' }), 0);
  t.is(h({ 'grpc-timeout': '123456789S' }), undefined, 'more than 8 digits');
  t.is(h({ 'grpc-timeout': '5x' }), undefined);
  t.is(grpcTimeoutValue(1234.9), '1234m');
  t.is(grpcTimeoutValue(0.2), '1m');
});

test('fault plan rolls delay and abort apart by percentage', (t) => {
  t.deepEqual(
    planFault(
      { delay: { percent: 100, fixedDelayMs: 7 }, abort: { percent: 0, httpStatus: 503 } },
      () => 0.5,
    ),
    { delayMs: 7 },
  );
  t.deepEqual(
    planFault({ abort: { percent: 50, httpStatus: 503 } }, () => 0.2),
    { delayMs: 0, abortStatus: 503 },
  );
  t.deepEqual(
    planFault({ abort: { percent: 50, httpStatus: 503 } }, () => 0.7),
    { delayMs: 0 },
  );
  t.deepEqual(
    planFault(undefined, () => 0),
    { delayMs: 0 },
  );
});

test('circuit breaker counters: max requests, pending connects and connections', (t) => {
  const policy = {
    ...defaultBackendPolicy('n/s'),
    circuitBreaker: { maxConnections: 2, maxPendingRequests: 1, maxRequests: 2 },
  };
  const c = new BackendCluster(policy, new ManualClock());
  const a = c.admitRequest();
  const b = c.admitRequest();
  t.true(a.ok && b.ok);
  t.deepEqual(c.admitRequest(), { ok: false, reason: 'max_requests' });
  if (a.ok) a.release();
  if (a.ok) a.release();
  t.true(c.admitRequest().ok, 'release is idempotent and frees one slot');
  const p = c.admitPending();
  t.true(p.ok);
  t.false(c.admitPending().ok);
  if (p.ok) p.release();
  t.true(c.tryOpenConnection() && c.tryOpenConnection());
  t.false(c.tryOpenConnection());
  c.connectionClosed();
  t.true(c.tryOpenConnection());
});

test('load balancing: round robin skips ejected hosts and the host a retry just failed on', (t) => {
  const c = new BackendCluster(defaultBackendPolicy('n/s'), new ManualClock());
  const eps = ['a', 'b', 'c'].map((key) => ({ key }) as unknown as Endpoint);
  t.deepEqual(
    [c.pick(eps), c.pick(eps), c.pick(eps), c.pick(eps)].map((e) => e?.key),
    ['a', 'b', 'c', 'a'],
  );
  t.not(c.pick(eps, 'c')?.key, 'c');
  const lr = new BackendCluster(
    { ...defaultBackendPolicy('n/s'), loadBalancer: 'LEAST_REQUEST' },
    new ManualClock(),
  );
  for (let i = 0; i < 5; i++) lr.hostStarted('a');
  let toA = 0;
  for (let i = 0; i < 200; i++) if (lr.pick(eps)?.key === 'a') toA++;
  t.true(toA < 40, `least-request sends little to the busy host (${toA}/200)`);
});
