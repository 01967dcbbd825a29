import * as http2 from 'node:http2';
import test from 'ava';
import { h1Request, h2Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

const ROUTES = `
httpRoutes:
  - name: server-routes
    parentRefs: [{ name: server, port: 80 }]
    rules:
      - matches: [{ path: { type: Exact, value: /only-v2 } }]
        backendRefs: [{ name: server-v2, port: 80 }]
      - matches: [{ path: { type: PathPrefix, value: /api }, headers: [{ name: x-canary, value: "1" }] }]
        backendRefs: [{ name: server-v2, port: 80 }]
      - matches: [{ path: { type: PathPrefix, value: /api } }]
        backendRefs: [{ name: server-v1, port: 80, weight: 90 }, { name: server-v2, port: 80, weight: 10 }]
      - matches: [{ path: { type: RegularExpression, value: "/re/[0-9]+" }, method: POST }]
        backendRefs: [{ name: server-v2, port: 80 }]
      - backendRefs: [{ name: server-v1, port: 80 }]
`;

let mesh: WaypointMesh;

test.before(async () => {
  mesh = await startWaypointMesh(61, { extraYaml: ROUTES });
});

test.after.always(async () => {
  await mesh?.stop();
});

const get = (path: string, headers: Record<string, string> = {}, method = 'GET') =>
  h1Request(mesh.ip.client, mesh.port.client, { path, headers, method });

test.serial('HTTP/1.1 through source ztunnel → waypoint → destination ztunnel reaches the routed backend', async (t) => {
  const res = await get('/');
  t.is(res.status, 200);
  t.is(JSON.parse(res.body).app, 'server-v1');
});

test.serial('route precedence: Exact, header match over plain prefix, regex with method, default rule', async (t) => {
  const cases: Array<[string, Record<string, string>, string, string]> = [
    ['/only-v2', {}, 'GET', 'server-v2'],
    ['/only-v2/x', {}, 'GET', 'server-v1'],
    ['/api/x', { 'x-canary': '1' }, 'GET', 'server-v2'],
    ['/re/42', {}, 'POST', 'server-v2'],
    ['/re/42', {}, 'GET', 'server-v1'],
    ['/apix', {}, 'GET', 'server-v1'],
  ];
  for (const [path, headers, method, app] of cases) {
    const res = await get(path, headers, method);
    t.is(res.status, 200, `${method} ${path}`);
    t.is(JSON.parse(res.body).app, app, `${method} ${path} ${JSON.stringify(headers)}`);
  }
});

test.serial('a 90/10 weighted split holds within ±5% over 2,000 h2c requests', async (t) => {
  const session = http2.connect(`http://${mesh.ip.client}:${mesh.port.client}`);
  const counts: Record<string, number> = {};
  const total = 2000;
  let next = 0;
  const worker = async () => {
    while (next < total) {
      next++;
      const res = await h2Request(session, { ':path': '/api/split', ':authority': 'server.team-b.svc.cluster.local' });
      const app = JSON.parse(res.body).app as string;
      counts[app] = (counts[app] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
  session.close();
  const v1 = (counts['server-v1'] ?? 0) / total;
  t.log(counts);
  t.true(Math.abs(v1 - 0.9) <= 0.05, `v1 share ${v1}`);
});

test.serial('gRPC-style h2 keeps trailers (grpc-status) end to end', async (t) => {
  const session = http2.connect(`http://${mesh.ip.client}:${mesh.port.client}`);
  const res = await h2Request(
    session,
    { ':method': 'POST', ':path': '/pkg.Svc/Call', 'content-type': 'application/grpc', te: 'trailers' },
    'payload',
  );
  session.close();
  t.is(res.status, 200);
  t.is(res.trailers?.['grpc-status'], '0');
  t.is(res.headers['x-app'], 'server-v1');
});

test.serial('traceparent keeps the trace id with a new span id; the request counts in istio_requests_total', async (t) => {
  const trace = '0af7651916cd43dd8448eb211c80319c';
  const res = await get('/', { traceparent: `00-${trace}-b7ad6b7169203331-01` });
  t.is(res.status, 200);
  const seen = String(mesh.apps.v1.last?.traceparent);
  t.regex(seen, new RegExp(`^00-${trace}-[0-9a-f]{16}-01$`));
  t.not(seen.split('-')[2], 'b7ad6b7169203331');
  const text = await mesh.waypoint.metrics.registry.metrics();
  const line = text.split('\n').find((l) => l.startsWith('istio_requests_total{') && l.includes('response_code="200"'));
  t.truthy(line);
  t.true(line!.includes('reporter="waypoint"'));
  t.true(line!.includes('source_principal="spiffe://cluster.local/ns/team-a/sa/client"'));
  t.true(line!.includes('destination_service="server-v1.team-b.svc.cluster.local"'));
  t.true(text.includes('istio_request_duration_milliseconds_bucket{'));
});
