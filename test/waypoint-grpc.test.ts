import test from 'ava';
import {
  call,
  ECHO_SERVICE,
  type EchoClient,
  type EchoReply,
  echoClient,
  metadata,
  startGrpcEcho,
} from './helpers/grpc-echo.js';
import { startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

// gRPC through the mesh: a @grpc/grpc-js client on node-a → source ztunnel → HBONE → the
// waypoint (GRPCRoute, L7 policy) → HBONE → destination ztunnel → @grpc/grpc-js servers.
const ROUTES = `
grpcRoutes:
  - name: echo
    parentRefs: [{ kind: Service, name: server, port: 80 }]
    rules:
      - matches: [{ method: { service: ${ECHO_SERVICE}, method: EchoTwo } }]
        backendRefs: [{ name: server-v2, port: 80 }]
      - matches: [{ method: { type: RegularExpression, method: "Ch.t" }, headers: [{ name: x-canary, value: "1" }] }]
        backendRefs: [{ name: server-v2, port: 80 }]
      - backendRefs: [{ name: server-v1, port: 80 }]
authorizationPolicies:
  - name: deny-admin
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]
    action: DENY
    rules: [{ to: [{ operation: { paths: ["/${ECHO_SERVICE}/Admin"] } }] }]
`;

let mesh: WaypointMesh;
let client: EchoClient;

test.before(async () => {
  mesh = await startWaypointMesh(84, { extraYaml: ROUTES, app: startGrpcEcho });
  client = echoClient(`${mesh.ip.client}:${mesh.port.client}`, 'server.team-b.svc.cluster.local');
});

test.after.always(async () => {
  client?.close();
  await mesh?.stop();
});

test.serial(
  'a unary call goes through the waypoint over HTTP/2 and its grpc-status trailer comes back',
  async (t) => {
    const r = await call(client, 'Echo', { 'x-request': 'one' });
    t.is(r.code, 0, r.details);
    t.like(r.reply, { app: 'server-v1', method: 'Echo', metadata: { 'x-request': 'one' } });
  },
);

test.serial(
  'GRPCRoute method matches route by service and method: EchoTwo to v2, the rest to v1',
  async (t) => {
    for (let i = 0; i < 5; i++) {
      t.is((await call(client, 'EchoTwo')).reply?.app, 'server-v2');
      t.is((await call(client, 'Echo')).reply?.app, 'server-v1');
      t.is((await call(client, 'EchoThree')).reply?.app, 'server-v1');
    }
  },
);

/**
 * One Chat call. Ping-pong (default): each message is sent once the answer to the previous
 * one came back, so both directions stay open for the whole call. Pipelined: every message
 * is written at once, so more than a flow-control window is in flight each way.
 */
function chat(
  md: Record<string, string>,
  texts: string[],
  pipelined = false,
): Promise<{ code: number; replies: EchoReply[] }> {
  return new Promise((resolve) => {
    const stream = client.Chat(metadata(md));
    const replies: EchoReply[] = [];
    let i = 0;
    const next = () => {
      if (i < texts.length) stream.write({ text: texts[i++] as string });
      else stream.end();
    };
    stream.on('data', (r: EchoReply) => {
      replies.push(r);
      if (!pipelined) next();
    });
    stream.on('status', (s: { code: number }) => resolve({ code: s.code, replies }));
    stream.on('error', () => {});
    if (!pipelined) {
      next();
      return;
    }
    for (const text of texts) stream.write({ text });
    stream.end();
  });
}

test.serial(
  'bidirectional streaming: ping-pong of 50 messages keeps order, and the regex + header match picks v2',
  async (t) => {
    const texts = Array.from({ length: 50 }, (_, i) => `m${i}`);
    const v1 = await chat({}, texts);
    t.is(v1.code, 0);
    t.deepEqual(
      v1.replies.map((r) => r.text),
      texts,
    );
    t.true(v1.replies.every((r) => r.app === 'server-v1'));
    const v2 = await chat({ 'x-canary': '1' }, texts.slice(0, 5));
    t.is(v2.code, 0);
    t.deepEqual(
      v2.replies.map((r) => [r.app, r.n]),
      [0, 1, 2, 3, 4].map((n) => ['server-v2', n]),
    );
  },
);

test.serial(
  '4 MiB written at once each way crosses the waypoint under HTTP/2 flow control, in order',
  async (t) => {
    const texts = Array.from({ length: 64 }, (_, i) => `${i}:`.padEnd(64 * 1024, 'x'));
    const r = await chat({}, texts, true);
    t.is(r.code, 0);
    t.is(r.replies.length, texts.length);
    t.true(
      r.replies.every((x, i) => x.text === texts[i] && x.n === i),
      'every message back, in order',
    );
  },
);

test.serial(
  'AuthorizationPolicy paths on /pkg.Service/Method: the denied method gets PERMISSION_DENIED, others pass',
  async (t) => {
    const before = mesh.apps.v1.hits + mesh.apps.v2.hits;
    const denied = await call(client, 'Admin');
    t.is(denied.code, 7, 'grpc-status 7 PERMISSION_DENIED, as Envoy maps its 403');
    t.is(denied.details, 'RBAC: access denied');
    t.is(mesh.apps.v1.hits + mesh.apps.v2.hits, before, 'the backend never saw it');
    t.is((await call(client, 'Echo')).code, 0);
  },
);

test.serial(
  'a method no GRPCRoute rule matches gets UNIMPLEMENTED (Envoy: 404 → grpc-status 12)',
  async (t) => {
    mesh.waypoint.setConfig(
      mesh.config(`
grpcRoutes:
  - name: echo
    parentRefs: [{ name: server, port: 80 }]
    rules:
      - matches: [{ method: { service: ${ECHO_SERVICE}, method: Echo } }]
        backendRefs: [{ name: server-v1, port: 80 }]
`),
    );
    t.teardown(() => mesh.waypoint.setConfig(mesh.config(ROUTES)));
    t.is((await call(client, 'Echo')).code, 0);
    const miss = await call(client, 'EchoTwo');
    t.is(miss.code, 12);
  },
);

test.serial(
  'the waypoint counts gRPC requests with request_protocol grpc and the grpc-status it saw',
  async (t) => {
    const text = await mesh.waypoint.metrics.registry.metrics();
    t.regex(text, /istio_requests_total\{[^}]*request_protocol="grpc"[^}]*grpc_response_status="0"/);
    t.regex(text, /istio_requests_total\{[^}]*request_protocol="grpc"[^}]*grpc_response_status="7"/);
  },
);

test.serial(
  'GRPCRoute filters on the rule and on each backendRef, with weights: the chosen backend’s own filter only, response headers back to grpc-js',
  async (t) => {
    const edit = (name: string, value: string) =>
      `[{ type: RequestHeaderModifier, requestHeaderModifier: { add: [{ name: ${name}, value: ${value} }] } }]`;
    mesh.waypoint.setConfig(
      mesh.config(`
grpcRoutes:
  - name: echo
    parentRefs: [{ name: server, port: 80 }]
    rules:
      - matches: [{ method: { service: ${ECHO_SERVICE}, method: EchoThree } }]
        filters:
          - { type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: x-route, value: three }], remove: [x-drop] } }
          - { type: ResponseHeaderModifier, responseHeaderModifier: { add: [{ name: x-resp, value: from-route }] } }
        backendRefs:
          - { name: server-v1, port: 80, weight: 1, filters: ${edit('x-backend', 'v1')} }
          - { name: server-v2, port: 80, weight: 3, filters: ${edit('x-backend', 'v2')} }
      - backendRefs: [{ name: server-v1, port: 80 }]
`),
    );
    t.teardown(() => mesh.waypoint.setConfig(mesh.config(ROUTES)));
    const seen = { 'server-v1': 0, 'server-v2': 0 } as Record<string, number>;
    for (let i = 0; i < 40; i++) {
      const { reply, headers } = await new Promise<{ reply?: EchoReply; headers: Record<string, unknown> }>(
        (resolve) => {
          let headers: Record<string, unknown> = {};
          const c = client.EchoThree({}, metadata({ 'x-drop': 'gone', 'x-route': 'client' }), {}, (e, r) =>
            resolve({ ...(e || !r ? {} : { reply: r }), headers }),
          );
          c.on('metadata', (md) => {
            headers = md.getMap();
          });
        },
      );
      if (!reply) return t.fail('call failed');
      seen[reply.app] = (seen[reply.app] ?? 0) + 1;
      t.is(reply.metadata['x-route'], 'three', 'the rule’s set overwrote the client’s value');
      t.is(reply.metadata['x-drop'], undefined, 'the rule removed it');
      t.is(reply.metadata['x-backend'], reply.app.replace('server-', ''), 'only the chosen backend’s filter');
      t.is(headers['x-resp'], 'from-route', 'response header modifier');
    }
    t.true(seen['server-v1']! > 0 && seen['server-v2']! > seen['server-v1']!, JSON.stringify(seen));
    const other = await call(client, 'Echo', { 'x-drop': 'kept' });
    t.is(other.reply?.metadata['x-drop'], 'kept', 'another rule: no filter');
    t.is(other.reply?.metadata['x-backend'], undefined);
  },
);
