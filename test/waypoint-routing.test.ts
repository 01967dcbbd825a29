import * as http from 'node:http';
import * as http2 from 'node:http2';
import { connect } from 'node:net';
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

test.serial(
  'HTTP/1.1 through source ztunnel → waypoint → destination ztunnel reaches the routed backend',
  async (t) => {
    const res = await get('/');
    t.is(res.status, 200);
    t.is(JSON.parse(res.body).app, 'server-v1');
  },
);

test.serial(
  'route precedence: Exact, header match over plain prefix, regex with method, default rule',
  async (t) => {
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
  },
);

test.serial(
  'a 90/10 weighted split holds within ±5% over 2,000 h2c requests, leaving no tunnel open',
  async (t) => {
    const session = http2.connect(`http://${mesh.ip.client}:${mesh.port.client}`);
    const counts: Record<string, number> = {};
    const total = 2000;
    let next = 0;
    const worker = async () => {
      while (next < total) {
        next++;
        const res = await h2Request(session, {
          ':path': '/api/split',
          ':authority': 'server.team-b.svc.cluster.local',
        });
        const app = JSON.parse(res.body).app as string;
        counts[app] = (counts[app] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    session.close();
    const v1 = (counts['server-v1'] ?? 0) / total;
    t.log(counts);
    t.true(Math.abs(v1 - 0.9) <= 0.05, `v1 share ${v1}`);
    const deadline = Date.now() + 3000;
    while (mesh.waypoint.stats().downstreamTunnels > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    t.is(
      mesh.waypoint.stats().downstreamTunnels,
      0,
      'the client closed, so did its tunnel and upstream connections',
    );
  },
);

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

test.serial(
  'traceparent keeps the trace id with a new span id; the request counts in istio_requests_total',
  async (t) => {
    const trace = '0af7651916cd43dd8448eb211c80319c';
    const res = await get('/', { traceparent: `00-${trace}-b7ad6b7169203331-01` });
    t.is(res.status, 200);
    const seen = String(mesh.apps.v1.last?.traceparent);
    t.regex(seen, new RegExp(`^00-${trace}-[0-9a-f]{16}-01$`));
    t.not(seen.split('-')[2], 'b7ad6b7169203331');
    const text = await mesh.waypoint.metrics.registry.metrics();
    const line = text
      .split('\n')
      .find((l) => l.startsWith('istio_requests_total{') && l.includes('response_code="200"'));
    t.truthy(line);
    t.true(line!.includes('reporter="waypoint"'));
    t.true(line!.includes('source_principal="spiffe://cluster.local/ns/team-a/sa/client"'));
    t.true(line!.includes('destination_service="server-v1.team-b.svc.cluster.local"'));
    t.true(text.includes('istio_request_duration_milliseconds_bucket{'));
  },
);

const POLICIES = `
authorizationPolicies:
  - name: deny-admin
    namespace: team-b
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]
    action: DENY
    rules:
      - to: [{ operation: { paths: ["/admin*"] } }]
      - when: [{ key: "request.headers[x-block]", values: ["yes"] }]
  - name: allow-client
    namespace: team-b
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: ALLOW
    rules:
      - from: [{ source: { principals: ["cluster.local/ns/team-a/sa/client"] } }]
        to: [{ operation: { methods: ["GET", "HEAD"], notPaths: ["/private*"] } }]
      - from: [{ source: { namespaces: ["team-a"], notPrincipals: ["cluster.local/ns/team-a/sa/client"] } }]
        to: [{ operation: { methods: ["GET"], paths: ["/public*"] } }]
        when: [{ key: "request.headers[x-token]", values: ["t-*"] }]
  - name: someone-elses
    namespace: team-b
    targetRefs: [{ kind: Gateway, name: other-waypoint }]
    action: DENY
    rules: [{}]
`;

test.serial(
  'L7 authorization table through the real path: 403 "RBAC: access denied" on denial',
  async (t) => {
    mesh.waypoint.setConfig(mesh.config(ROUTES + POLICIES));
    const client = mesh.port.client;
    const intruder = mesh.port.intruder;
    const table: Array<[number, string, string, Record<string, string>, number]> = [
      [client, 'GET', '/', {}, 200],
      [client, 'HEAD', '/', {}, 200],
      [client, 'POST', '/', {}, 403],
      [client, 'GET', '/private/x', {}, 403],
      [client, 'GET', '/admin', {}, 403],
      [client, 'GET', '/', { 'x-block': 'yes' }, 403],
      [client, 'GET', '/', { 'x-block': 'no' }, 200],
      [intruder, 'GET', '/', {}, 403],
      [intruder, 'GET', '/public/a', {}, 403],
      [intruder, 'GET', '/public/a', { 'x-token': 't-1' }, 200],
      [intruder, 'GET', '/public/a', { 'x-token': 'bad' }, 403],
      [intruder, 'POST', '/public/a', { 'x-token': 't-1' }, 403],
      [intruder, 'GET', '/admin/public', { 'x-token': 't-1' }, 403],
    ];
    for (const [port, method, path, headers, status] of table) {
      const res = await h1Request(port === client ? mesh.ip.client : mesh.ip.intruder, port, {
        method,
        path,
        headers,
      });
      const who = port === client ? 'client' : 'intruder';
      t.is(res.status, status, `${who} ${method} ${path} ${JSON.stringify(headers)}`);
      if (status === 403) t.is(res.body, 'RBAC: access denied');
    }
    mesh.waypoint.setConfig(mesh.config(ROUTES));
  },
);

test.serial(
  'an unknown :authority is refused 400; a principal every rule denies is refused 401 at CONNECT',
  async (t) => {
    const { connectHbone } = await import('@zmesh/shared');
    const credential = await mesh.a.certs.fetch('spiffe://cluster.local/ns/team-a/sa/intruder');
    const session = await connectHbone({
      host: mesh.ip.waypoint,
      port: 15008,
      credential,
      bundle: mesh.bundle,
      expectedIdentities: ['spiffe://cluster.local/ns/team-b/sa/waypoint'],
    });
    const status = async (authority: string) => {
      try {
        const tunnel = await session.openTunnel({ authority });
        tunnel.destroy();
        return 200;
      } catch (e) {
        return Number((e as { context?: { status?: number } }).context?.status);
      }
    };
    t.is(await status(`${mesh.ip.vip}:80`), 200);
    t.is(await status(`${mesh.ip.vip}:82`), 400, 'port the service does not have');
    t.is(await status(`127.61.200.1:80`), 400, 'address nobody has');
    t.is(await status(`${mesh.ip.v1}:7000`), 200, 'a pod of a served service, on its target port');
    t.is(await status(`${mesh.ip.v1}:15008`), 400, 'mesh ports are never a destination');
    mesh.waypoint.setConfig(
      mesh.config(`
authorizationPolicies:
  - name: client-only
    targetRefs: [{ kind: Gateway, name: waypoint }]
    rules: [{ from: [{ source: { principals: ["cluster.local/ns/team-a/sa/client"] } }] }]
`),
    );
    t.is(await status(`${mesh.ip.vip}:80`), 401);
    session.close();
    mesh.waypoint.setConfig(mesh.config(ROUTES));
  },
);

test.serial(
  'waypoint down: the namespace fails closed at the source ztunnel; restarted, traffic recovers',
  async (t) => {
    await mesh.waypoint.stop();
    const err = await t.throwsAsync(get('/'));
    t.truthy(err, 'the client connection is reset, never routed around the waypoint');
    const before = mesh.apps.v1.hits + mesh.apps.v2.hits;
    await t.throwsAsync(get('/'));
    t.is(mesh.apps.v1.hits + mesh.apps.v2.hits, before, 'no request reached a backend');
    const text = await mesh.a.metrics.registry.metrics();
    t.regex(text, /zmesh_errors_total\{code="ZM_ERR_HBONE_SESSION",flag="UF"\} [1-9]/);
    mesh.waypoint = await mesh.startWaypoint(mesh.config(ROUTES));
    const res = await get('/');
    t.is(res.status, 200);
  },
);

/** Sends bytes, half-closes, resolves with what came back (or null if the connection was reset). */
function tcpRoundTrip(host: string, port: number, payload: Buffer): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const s = connect({ host, port, allowHalfOpen: true });
    const chunks: Buffer[] = [];
    s.on('data', (d: Buffer) => chunks.push(d));
    s.once('end', () => {
      s.end();
      resolve(Buffer.concat(chunks));
    });
    s.once('error', () => resolve(null));
    s.once('close', () => resolve(null));
    s.setTimeout(5000, () => s.destroy());
    s.once('connect', () => s.end(payload));
  });
}

test.serial('opaque TCP through the waypoint gets L4 rules only and byte-exact forwarding', async (t) => {
  const payload = Buffer.from([0, 1, 2, 3, 255, 254, 10, 13]);
  const back = await tcpRoundTrip(mesh.ip.client, mesh.port.clientTcp, payload);
  t.deepEqual(back, payload);
  mesh.waypoint.setConfig(
    mesh.config(`
authorizationPolicies:
  - name: no-intruder-tcp
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: DENY
    rules: [{ from: [{ source: { principals: ["cluster.local/ns/team-a/sa/intruder"] } }], to: [{ operation: { ports: ["81"] } }] }]
  - name: http-only-deny
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: DENY
    rules: [{ from: [{ source: { principals: ["cluster.local/ns/team-a/sa/client"] } }], to: [{ operation: { paths: ["/x"] } }] }]
`),
  );
  t.is(await tcpRoundTrip(mesh.ip.intruder, mesh.port.intruderTcp, payload), null, 'denied by L4 fields');
  const denied = await tcpRoundTrip(mesh.ip.client, mesh.port.clientTcp, payload);
  t.true(
    denied === null || denied.length === 0,
    'a DENY rule with HTTP-only fields denies all TCP (Istio semantics)',
  );
  t.is((await get('/')).status, 200, 'HTTP from the same client is judged per request');
  mesh.waypoint.setConfig(mesh.config(ROUTES));
});

test.serial('a request no rule of the attached routes matches gets 404', async (t) => {
  mesh.waypoint.setConfig(
    mesh.config(`
httpRoutes:
  - name: narrow
    parentRefs: [{ name: server }]
    rules: [{ matches: [{ path: { type: Exact, value: /only } }], backendRefs: [{ name: server-v2, port: 80 }] }]
`),
  );
  t.is((await get('/only')).status, 200);
  const miss = await get('/other');
  t.is(miss.status, 404);
  t.is(miss.headers['x-zmesh-error'], 'ZM_ERR_WAYPOINT_NO_ROUTE');
  mesh.waypoint.setConfig(mesh.config(ROUTES));
});

test.serial('requests on one keep-alive connection reuse one upstream connection per endpoint', async (t) => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
  process.on('warning', onWarning);
  t.teardown(() => process.off('warning', onWarning));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < 20; i++)
    t.is((await h1Request(mesh.ip.client, mesh.port.client, { path: '/', agent })).status, 200);
  await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
  t.deepEqual(
    warnings.filter((w) => w.startsWith('MaxListenersExceededWarning')),
    [],
    'reusing the upstream tunnel adds no listener per request',
  );
  const cluster = mesh.waypoint.cluster('team-b/server-v1.team-b.svc.cluster.local')!;
  t.is(cluster.counts.connections, 1, 'one tunnel to server-v1 carried all 20');
  t.is(mesh.waypoint.stats().downstreamTunnels, 1);
  agent.destroy();
  const deadline = Date.now() + 3000;
  while (cluster.counts.connections > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  t.is(cluster.counts.connections, 0, 'closed with the downstream connection');
});

function upgrade(
  path: string,
  host = mesh.ip.client,
  port = mesh.port.client,
): Promise<{ status: number; echo?: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host,
      port,
      path,
      agent: false,
      headers: { host: 'server.team-b.svc.cluster.local', connection: 'Upgrade', upgrade: 'echo' },
    });
    req.once('upgrade', (res, socket) => {
      socket.once('data', (d: Buffer) => {
        socket.destroy();
        resolve({ status: res.statusCode ?? 0, echo: d.toString() });
      });
      socket.write('ping over the upgraded connection');
    });
    req.once('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0 });
    });
    req.once('error', reject);
    req.end();
  });
}

test.serial(
  'HTTP/1.1 Upgrade (WebSocket-style) is routed, authorized, then spliced to the endpoint',
  async (t) => {
    const ok = await upgrade('/only-v2');
    t.is(ok.status, 101);
    t.is(ok.echo, 'ping over the upgraded connection');
    t.truthy(mesh.apps.v2.last?.traceparent, 'the endpoint saw this hop’s traceparent');
    t.is(mesh.apps.v2.last?.upgrade, 'echo');
    mesh.waypoint.setConfig(
      mesh.config(`${ROUTES}
authorizationPolicies:
  - name: no-upgrades-to-admin
    targetRefs: [{ kind: Gateway, name: waypoint }]
    action: DENY
    rules: [{ to: [{ operation: { paths: ["/admin*"] } }] }]
`),
    );
    t.is((await upgrade('/admin/socket')).status, 403);
    t.is((await upgrade('/socket')).status, 101);
    mesh.waypoint.setConfig(mesh.config(ROUTES));
  },
);
