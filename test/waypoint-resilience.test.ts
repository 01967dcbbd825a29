import * as http2 from 'node:http2';
import { type Clock, systemClock } from '@zmesh/waypoint';
import test from 'ava';
import { h1Request, h2Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/** Real sleeps (backoff stays short) but a wall clock tests can move forward. */
class OffsetClock implements Clock {
  offset = 0;
  now(): number {
    return Date.now() + this.offset;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return systemClock.sleep(ms, signal);
  }
}

const caseRule = (name: string, extra: string, backend = 'server') => `
      - matches: [{ headers: [{ name: x-case, value: ${name} }] }]
        backendRefs: [{ name: ${backend}, port: 80 }]
${extra
  .split('\n')
  .filter(Boolean)
  .map((l) => `        ${l}`)
  .join('\n')}`;

const RESILIENCE = `
httpRoutes:
  - name: resilience
    parentRefs: [{ name: server }]
    rules:
${caseRule('retry', 'retry: { attempts: 2, retryOn: "5xx,reset,connect-failure", backoffBase: 2ms, backoffMax: 10ms }')}
${caseRule('retry-post', 'retry: { attempts: 2, retryOn: "5xx", backoffBase: 2ms, backoffMax: 10ms, retryNonIdempotent: true }')}
${caseRule('limited', 'rateLimit: { maxTokens: 3, tokensPerFill: 3, fillInterval: 1h }')}
${caseRule('fault', 'fault: { abort: { percent: 100, httpStatus: 418 } }')}
${caseRule('timeout', 'timeouts: { request: 150ms }')}
${caseRule('breaker', '', 'server-v1')}
${caseRule('connections', '', 'server-v2')}
      - backendRefs: [{ name: server, port: 80 }]
backendPolicies:
  - service: team-b/server-v1.team-b.svc.cluster.local
    circuitBreaker: { maxRequests: 2 }
  - service: team-b/server-v2.team-b.svc.cluster.local
    circuitBreaker: { maxConnections: 1 }
`;

let mesh: WaypointMesh;
const clock = new OffsetClock();

test.before(async () => {
  mesh = await startWaypointMesh(63, { extraYaml: RESILIENCE, clock });
});

test.after.always(async () => {
  await mesh?.stop();
});

/** A fresh waypoint: breaker, budget and outlier state start from zero. */
async function restartWaypoint(): Promise<void> {
  await mesh.waypoint.stop();
  mesh.waypoint = await mesh.startWaypoint();
  mesh.apps.v1.failWith = 0;
  mesh.apps.v2.failWith = 0;
}

const hits = () => mesh.apps.v1.hits + mesh.apps.v2.hits;
const get = (headers: Record<string, string>, path = '/', method = 'GET') =>
  h1Request(mesh.ip.client, mesh.port.client, { headers, path, method });

test.serial(
  'with every backend failing, 60 concurrent requests make at most 60 × 1.2 + 3 attempts',
  async (t) => {
    await restartWaypoint();
    mesh.apps.v1.failWith = 503;
    mesh.apps.v2.failWith = 503;
    const before = hits();
    const session = http2.connect(`http://${mesh.ip.client}:${mesh.port.client}`);
    const results = await Promise.all(
      Array.from({ length: 60 }, () => h2Request(session, { ':path': '/slow/100', 'x-case': 'retry' })),
    );
    session.close();
    const attempts = hits() - before;
    t.log(`attempts ${attempts}`);
    t.true(results.every((r) => r.status === 503));
    t.true(attempts <= 60 * 1.2 + 3, `attempts ${attempts}`);
    t.true(attempts > 60, 'some retries happened');
    t.is(results[0]!.headers['x-zmesh-retry-owner'], 'team-b/waypoint');
  },
);

test.serial('a non-idempotent request is retried only when the route allows it', async (t) => {
  await restartWaypoint();
  mesh.apps.v1.failWith = 503;
  mesh.apps.v2.failWith = 503;
  let before = hits();
  t.is((await get({ 'x-case': 'retry' }, '/', 'POST')).status, 503);
  t.is(hits() - before, 1, 'POST not retried');
  before = hits();
  t.is((await get({ 'x-case': 'retry' }, '/', 'GET')).status, 503);
  t.is(hits() - before, 3, 'GET retried twice');
  before = hits();
  t.is((await get({ 'x-case': 'retry-post' }, '/', 'POST')).status, 503);
  t.is(hits() - before, 3, 'POST retried where retryNonIdempotent is set');
  before = hits();
  t.is((await get({ 'x-case': 'retry', 'x-zmesh-retry-owner': 'team-a/edge' })).status, 503);
  t.is(hits() - before, 1, 'an outer hop that owns retries is not second-guessed');
});

test.serial('an expired deadline never reaches the backend; a live one shrinks per hop', async (t) => {
  await restartWaypoint();
  const before = hits();
  const expired = await get({ 'x-zmesh-deadline-ms': '0' });
  t.is(expired.status, 504);
  t.is(expired.headers['x-zmesh-error'], 'ZM_ERR_WAYPOINT_DEADLINE');
  const grpc = await get({ 'grpc-timeout': '0m', 'content-type': 'application/grpc' }, '/pkg.Svc/M', 'POST');
  t.is(grpc.status, 200, 'a gRPC local reply is trailers-only with :status 200, as Envoy sends it');
  t.is(grpc.headers['grpc-status'], '4', 'DEADLINE_EXCEEDED for gRPC clients');
  t.is(hits(), before, 'no backend call');
  t.is((await get({ 'x-zmesh-deadline-ms': '5000' })).status, 200);
  const seen = Number(
    mesh.apps.v1.last?.['x-zmesh-deadline-ms'] ?? mesh.apps.v2.last?.['x-zmesh-deadline-ms'],
  );
  t.true(seen <= 5000 && seen > 3000, `forwarded budget ${seen}`);
  const slow = await get({ 'x-case': 'timeout' }, '/slow/1000');
  t.is(slow.status, 504, 'route timeout');
});

test.serial(
  'outlier detection ejects after 5 consecutive 5xx and readmits after the ejection time',
  async (t) => {
    await restartWaypoint();
    mesh.apps.v1.failWith = 503;
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await get({})).status);
    t.is(statuses.filter((s) => s === 503).length, 5, `${statuses}`);
    const v1Before = mesh.apps.v1.hits;
    for (let i = 0; i < 6; i++) t.is((await get({})).status, 200, 'v1 is ejected: all traffic to v2');
    t.is(mesh.apps.v1.hits, v1Before);
    mesh.apps.v1.failWith = 0;
    clock.offset += 30_000 + 10_000;
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) seen.add(JSON.parse((await get({})).body).app);
    t.true(seen.has('server-v1'), 'readmitted after 30 s and the next 10 s sweep');
    const text = await mesh.waypoint.metrics.registry.metrics();
    t.regex(
      text,
      /zmesh_waypoint_outlier_ejections_total\{destination_service="team-b\/server.team-b.svc.cluster.local"\} 1/,
    );
  },
);

test.serial('outlier detection never ejects the last host', async (t) => {
  await restartWaypoint();
  mesh.apps.v1.failWith = 503;
  mesh.apps.v2.failWith = 503;
  for (let i = 0; i < 20; i++) await get({});
  const cluster = mesh.waypoint.cluster('team-b/server.team-b.svc.cluster.local')!;
  const ejected = [`${mesh.ip.v1}:7000`, `${mesh.ip.v2}:7000`].filter((h) => cluster.outlier.isEjected(h));
  t.is(ejected.length, 1);
});

test.serial(
  'circuit breaker: beyond maxRequests, 503 with flag UO; rate limit: 429 with x-ratelimit headers',
  async (t) => {
    await restartWaypoint();
    const results = await Promise.all(
      Array.from({ length: 5 }, () => get({ 'x-case': 'breaker' }, '/slow/300')),
    );
    const codes = results.map((r) => r.status).sort();
    t.deepEqual(codes, [200, 200, 503, 503, 503]);
    t.true(
      results
        .filter((r) => r.status === 503)
        .every((r) => r.headers['x-zmesh-error'] === 'ZM_ERR_WAYPOINT_OVERFLOW'),
    );
    const text = await mesh.waypoint.metrics.registry.metrics();
    t.regex(text, /istio_requests_total\{[^}]*response_code="503"[^}]*response_flags="UO"\} 3/);
    const limited = [];
    for (let i = 0; i < 4; i++) limited.push(await get({ 'x-case': 'limited' }));
    t.deepEqual(
      limited.map((r) => r.status),
      [200, 200, 200, 429],
    );
    t.is(limited[3]!.headers['x-ratelimit-limit'], '3');
    t.is(limited[3]!.headers['x-ratelimit-remaining'], '0');
    t.is(limited[2]!.headers['x-ratelimit-remaining'], '0');
    t.is(limited[0]!.headers['x-ratelimit-remaining'], '2');
    const fault = await get({ 'x-case': 'fault' });
    t.is(fault.status, 418, 'fault injection abort');
    t.is(fault.headers['x-zmesh-error'], 'ZM_ERR_WAYPOINT_FAULT');
  },
);

test.serial(
  'circuit breaker: a new upstream connection beyond maxConnections overflows with 503 UO',
  async (t) => {
    await restartWaypoint();
    const first = get({ 'x-case': 'connections' }, '/slow/300');
    await new Promise((r) => setTimeout(r, 100));
    const second = await get({ 'x-case': 'connections' });
    t.is(second.status, 503);
    t.regex(second.body, /max_connections/);
    t.is((await first).status, 200);
    const cluster = mesh.waypoint.cluster('team-b/server-v2.team-b.svc.cluster.local')!;
    const deadline = Date.now() + 3000;
    while (cluster.counts.connections > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    t.is(cluster.counts.connections, 0, 'the connection closed with its downstream connection');
    t.is((await get({ 'x-case': 'connections' })).status, 200);
  },
);
