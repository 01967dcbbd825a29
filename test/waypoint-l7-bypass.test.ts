import * as http2 from 'node:http2';
import type { WaypointConfig } from '@zmesh/waypoint';
import test from 'ava';
import {
  h2Request,
  type Received,
  rawExchange,
  startRecordingApp,
  startWaypointMesh,
  statusesOf,
  type WaypointMesh,
} from './helpers/waypoint-fixture.js';

/**
 * Attempts to get a request past the waypoint's L7 policy, as raw HTTP/1.1 from a meshed
 * client through the real path: client → source ztunnel → waypoint → destination ztunnel →
 * an app that records exactly what it received. Each runs under both policy shapes: a DENY
 * on `/admin*`, and an ALLOW on `/public*` only.
 */

const TARGET = (name: string) => `
  - name: ${name}
    namespace: team-b
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]`;

const SHAPES = {
  deny: `
authorizationPolicies:${TARGET('deny-admin')}
    action: DENY
    rules:
      - to: [{ operation: { paths: ["/admin*"] } }]
`,
  allow: `
authorizationPolicies:${TARGET('allow-public')}
    action: ALLOW
    rules:
      - to: [{ operation: { paths: ["/public*"] } }]
`,
} as const;
type Shape = keyof typeof SHAPES;

let mesh: WaypointMesh;
let apps: Array<Awaited<ReturnType<typeof startRecordingApp>>>;
/** Every request either endpoint received, in arrival order. */
const received: Received[] = [];
const configs = {} as Record<Shape, WaypointConfig>;

test.before(async () => {
  mesh = await startWaypointMesh(68);
  // The fixture's apps answer upgrades; these ignore them, as most apps do.
  mesh.apps.v1.close();
  mesh.apps.v2.close();
  apps = [
    await startRecordingApp(mesh.ip.v1, 7000, received),
    await startRecordingApp(mesh.ip.v2, 7000, received),
  ];
  for (const shape of Object.keys(SHAPES) as Shape[]) configs[shape] = mesh.config(SHAPES[shape]);
});

test.after.always(async () => {
  for (const a of apps ?? []) a.close();
  await mesh?.stop();
});

const HOST = 'server.team-b.svc.cluster.local';

/** One request's bytes: the request line, Host unless given, the headers, then the body. */
function req(line: string, headers: string[] = [], body = ''): string {
  const all = headers.some((h) => /^host:/i.test(h)) ? headers : [`Host: ${HOST}`, ...headers];
  return `${line}\r\n${all.map((h) => `${h}\r\n`).join('')}\r\n${body}`;
}

const chunked = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n0\r\n\r\n`;
const SMUGGLED = `GET /admin HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`;

async function send(shape: Shape, bytes: string): Promise<{ statuses: number[]; received: Received[] }> {
  mesh.waypoint.setConfig(configs[shape]);
  received.length = 0;
  const reply = await rawExchange(mesh.ip.client, mesh.port.client, bytes, 1000);
  // A request smuggled behind the first would reach the app right after it.
  await new Promise((r) => setTimeout(r, 100));
  return { statuses: statusesOf(reply), received: [...received] };
}

const lines = (received: Received[]) => received.map((r) => `${r.method} ${r.url}`);

/** What one shape must yield: the statuses in order and the request lines the app received. */
interface Expect {
  statuses: number[];
  received: string[];
}
const ok = (line: string): Expect => ({ statuses: [200], received: [line] });
const denied: Expect = { statuses: [403], received: [] };
const bad: Expect = { statuses: [400], received: [] };
const both = (e: Expect) => ({ deny: e, allow: e });

interface Row {
  name: string;
  bytes: string;
  deny: Expect;
  allow: Expect;
  /** Also checked: the body the app received with its first request. */
  body?: string;
}

const close = 'Connection: close';

const ROWS: Row[] = [
  // Request-target forms (RFC 9112 §3.2).
  { name: 'origin-form /public', bytes: req('GET /public HTTP/1.1', [close]), ...both(ok('GET /public')) },
  { name: 'origin-form /admin', bytes: req('GET /admin HTTP/1.1', [close]), ...both(denied) },
  { name: 'origin-form /admin/x', bytes: req('GET /admin/x HTTP/1.1', [close]), ...both(denied) },
  {
    name: 'absolute-form of /admin, own authority',
    bytes: req(`GET http://${HOST}/admin HTTP/1.1`, [close]),
    ...both(denied),
  },
  {
    name: 'absolute-form of /public is sent upstream as origin-form',
    bytes: req(`GET http://${HOST}/public HTTP/1.1`, [close]),
    ...both(ok('GET /public')),
  },
  {
    name: 'absolute-form, authority in another case with the default port, and a query',
    bytes: req(`GET http://SERVER.team-b.svc.cluster.local:80/public?q=1 HTTP/1.1`, [close]),
    ...both(ok('GET /public?q=1')),
  },
  {
    name: 'absolute-form naming another authority (/admin)',
    bytes: req('GET http://evil.example/admin HTTP/1.1', [close]),
    ...both(bad),
  },
  {
    name: 'absolute-form naming another authority (/public)',
    bytes: req('GET http://evil.example/public HTTP/1.1', [close]),
    ...both(bad),
  },
  {
    name: 'absolute-form with userinfo',
    bytes: req(`GET http://user@${HOST}/public HTTP/1.1`, [close]),
    ...both(bad),
  },
  {
    name: 'absolute-form with no path is "/"',
    bytes: req(`GET http://${HOST} HTTP/1.1`, [close]),
    deny: ok('GET /'),
    allow: denied,
  },
  { name: 'asterisk-form with GET', bytes: req('GET * HTTP/1.1', [close]), ...both(bad) },
  {
    name: 'asterisk-form with OPTIONS',
    bytes: req('OPTIONS * HTTP/1.1', [close]),
    deny: ok('OPTIONS *'),
    allow: denied,
  },
  { name: 'a target without a leading slash', bytes: req('GET admin HTTP/1.1', [close]), ...both(bad) },
  // Path normalization (Istio's BASE).
  { name: 'dot segment /./admin', bytes: req('GET /./admin HTTP/1.1', [close]), ...both(denied) },
  { name: 'encoded dot /%2e/admin', bytes: req('GET /%2e/admin HTTP/1.1', [close]), ...both(denied) },
  { name: 'encoded letter /%61dmin', bytes: req('GET /%61dmin HTTP/1.1', [close]), ...both(denied) },
  {
    name: 'fully encoded /%61%64%6D%69%6E',
    bytes: req('GET /%61%64%6D%69%6E HTTP/1.1', [close]),
    ...both(denied),
  },
  { name: '/public/../admin', bytes: req('GET /public/../admin HTTP/1.1', [close]), ...both(denied) },
  { name: '/public/%2e%2e/admin', bytes: req('GET /public/%2e%2e/admin HTTP/1.1', [close]), ...both(denied) },
  { name: '/public/%2E%2E/admin', bytes: req('GET /public/%2E%2E/admin HTTP/1.1', [close]), ...both(denied) },
  { name: '/public/.%2e/admin', bytes: req('GET /public/.%2e/admin HTTP/1.1', [close]), ...both(denied) },
  {
    name: 'backslashes /public\\..\\admin',
    bytes: req('GET /public\\..\\admin HTTP/1.1', [close]),
    ...both(denied),
  },
  {
    name: '..; segment /public/..;/admin',
    bytes: req('GET /public/..;/admin HTTP/1.1', [close]),
    ...both(bad),
  },
  { name: '.; segment /.;/admin', bytes: req('GET /.;/admin HTTP/1.1', [close]), ...both(bad) },
  {
    name: 'encoded slash /public%2F..%2Fadmin',
    bytes: req('GET /public%2F..%2Fadmin HTTP/1.1', [close]),
    ...both(bad),
  },
  {
    name: 'encoded slash /public/%2fadmin',
    bytes: req('GET /public/%2fadmin HTTP/1.1', [close]),
    ...both(bad),
  },
  {
    name: 'encoded backslash /public%5c..%5cadmin',
    bytes: req('GET /public%5c..%5cadmin HTTP/1.1', [close]),
    ...both(bad),
  },
  { name: 'malformed %-encoding /public/%zz', bytes: req('GET /public/%zz HTTP/1.1', [close]), ...both(bad) },
  { name: 'truncated %-encoding /public/%', bytes: req('GET /public/% HTTP/1.1', [close]), ...both(bad) },
  { name: 'fragment /public#x', bytes: req('GET /public#x HTTP/1.1', [close]), ...both(bad) },
  { name: 'a trailing # on /admin#', bytes: req('GET /admin# HTTP/1.1', [close]), ...both(bad) },
  { name: 'a trailing ? on /admin?', bytes: req('GET /admin? HTTP/1.1', [close]), ...both(denied) },
  { name: 'a trailing ? on /admin/?', bytes: req('GET /admin/? HTTP/1.1', [close]), ...both(denied) },
  { name: 'a trailing slash /admin/', bytes: req('GET /admin/ HTTP/1.1', [close]), ...both(denied) },
  { name: 'lower-case encoding /%61dmin/x', bytes: req('GET /%61dmin/x HTTP/1.1', [close]), ...both(denied) },
  {
    name: 'upper-case encoding /%41DMIN is /ADMIN',
    bytes: req('GET /%41DMIN HTTP/1.1', [close]),
    deny: ok('GET /ADMIN'),
    allow: denied,
  },
  {
    name: 'the app receives the normalized path: /public/./a/../b',
    bytes: req('GET /public/./a/../b HTTP/1.1', [close]),
    ...both(ok('GET /public/b')),
  },
  {
    name: 'encoded unreserved /%70ublic',
    bytes: req('GET /%70ublic HTTP/1.1', [close]),
    ...both(ok('GET /public')),
  },
  {
    name: 'other encodings are kept, in upper case: /public/%c3%a9',
    bytes: req('GET /public/%c3%a9 HTTP/1.1', [close]),
    ...both(ok('GET /public/%C3%A9')),
  },
  {
    name: 'the query is not the path: /public?next=/admin',
    bytes: req('GET /public?next=/admin HTTP/1.1', [close]),
    ...both(ok('GET /public?next=/admin')),
  },
  {
    name: 'the query is not the path: /admin?x=/public',
    bytes: req('GET /admin?x=/public HTTP/1.1', [close]),
    ...both(denied),
  },
  {
    name: '"//admin" is not "/admin*" under BASE (Istio; MERGE_SLASHES merges it)',
    bytes: req('GET //admin HTTP/1.1', [close]),
    deny: ok('GET //admin'),
    allow: denied,
  },
  {
    name: 'paths are case-sensitive (Istio): /ADMIN',
    bytes: req('GET /ADMIN HTTP/1.1', [close]),
    deny: ok('GET /ADMIN'),
    allow: denied,
  },
  // Host.
  {
    name: 'no Host',
    bytes: req('GET /public HTTP/1.1', ['X-A: 1', close]).replace(`Host: ${HOST}\r\n`, ''),
    ...both(bad),
  },
  {
    name: 'two Hosts',
    bytes: req('GET /public HTTP/1.1', [`Host: ${HOST}`, 'Host: other', close]),
    ...both(bad),
  },
  // Bodies are framed upstream whatever the method.
  {
    name: 'GET /public with a chunked body holding GET /admin',
    bytes: req('GET /public HTTP/1.1', ['Transfer-Encoding: chunked', close], chunked(SMUGGLED)),
    ...both(ok('GET /public')),
    body: SMUGGLED,
  },
  {
    name: 'DELETE /public with a chunked body holding GET /admin',
    bytes: req('DELETE /public HTTP/1.1', ['Transfer-Encoding: chunked', close], chunked(SMUGGLED)),
    ...both(ok('DELETE /public')),
    body: SMUGGLED,
  },
  {
    name: 'OPTIONS /public with a Content-Length body holding GET /admin',
    bytes: req('OPTIONS /public HTTP/1.1', [`Content-Length: ${SMUGGLED.length}`, close], SMUGGLED),
    ...both(ok('OPTIONS /public')),
    body: SMUGGLED,
  },
  {
    name: 'Connection naming Content-Length',
    bytes: req(
      'GET /public HTTP/1.1',
      [`Content-Length: ${SMUGGLED.length}`, 'Connection: close, content-length'],
      SMUGGLED,
    ),
    ...both(bad),
  },
  {
    name: 'Connection naming Transfer-Encoding',
    bytes: req(
      'GET /public HTTP/1.1',
      ['Transfer-Encoding: chunked', 'Connection: close, transfer-encoding'],
      chunked(SMUGGLED),
    ),
    ...both(bad),
  },
  {
    name: 'Connection naming Host',
    bytes: req('GET /public HTTP/1.1', ['Connection: close, host']),
    ...both(bad),
  },
  {
    name: 'a Transfer-Encoding other than chunked',
    bytes: req('POST /public HTTP/1.1', ['Transfer-Encoding: gzip, chunked', close], chunked('x')),
    ...both(bad),
  },
  {
    name: 'Content-Length and Transfer-Encoding together',
    bytes: req(
      'POST /public HTTP/1.1',
      ['Content-Length: 4', 'Transfer-Encoding: chunked', close],
      chunked(SMUGGLED),
    ),
    ...both(bad),
  },
  {
    name: 'two different Content-Lengths',
    bytes: req('POST /public HTTP/1.1', ['Content-Length: 4', 'Content-Length: 5', close], 'abcde'),
    ...both(bad),
  },
  {
    name: 'Connection naming an end-to-end header drops only that header',
    bytes: req('GET /public HTTP/1.1', ['X-Hop: 1', 'Connection: close, x-hop']),
    ...both(ok('GET /public')),
  },
  // Pipelining: each request is judged on its own.
  {
    name: 'pipelined GET /public then GET /admin',
    bytes: req('GET /public HTTP/1.1') + req('GET /admin HTTP/1.1', [close]),
    deny: { statuses: [200, 403], received: ['GET /public'] },
    allow: { statuses: [200, 403], received: ['GET /public'] },
  },
  {
    name: 'pipelined GET /public then GET /public/2',
    bytes: req('GET /public HTTP/1.1') + req('GET /public/2 HTTP/1.1', [close]),
    ...both({ statuses: [200, 200], received: ['GET /public', 'GET /public/2'] }),
  },
  // Upgrades: a tunnel only after the app's 101.
  {
    name: 'websocket upgrade the app ignores, then GET /admin on the same connection',
    bytes:
      req('GET /public HTTP/1.1', ['Connection: Upgrade', 'Upgrade: websocket']) +
      req('GET /admin HTTP/1.1', [close]),
    ...both({ statuses: [200, 403], received: ['GET /public'] }),
  },
  {
    name: 'websocket upgrade the app ignores, then GET /public/2 on the same connection',
    bytes:
      req('GET /public HTTP/1.1', ['Connection: Upgrade', 'Upgrade: websocket']) +
      req('GET /public/2 HTTP/1.1', [close]),
    ...both({ statuses: [200, 200], received: ['GET /public', 'GET /public/2'] }),
  },
  {
    name: 'h2c upgrade',
    bytes:
      req('GET /public HTTP/1.1', [
        'Connection: Upgrade, HTTP2-Settings',
        'Upgrade: h2c',
        'HTTP2-Settings: AAMAAABkAAQAAP__',
      ]) + req('GET /admin HTTP/1.1', [close]),
    ...both(bad),
  },
  {
    name: 'upgrade request with a body',
    bytes: req(
      'GET /public HTTP/1.1',
      ['Connection: Upgrade', 'Upgrade: websocket', `Content-Length: ${SMUGGLED.length}`],
      SMUGGLED,
    ),
    ...both(bad),
  },
  {
    name: 'websocket upgrade to /admin',
    bytes: req('GET /admin HTTP/1.1', ['Connection: Upgrade', 'Upgrade: websocket']),
    ...both(denied),
  },
];

test.serial(
  `a table of ${ROWS.length} request targets and header combinations: what policy decided and what the app received`,
  async (t) => {
    t.true(ROWS.length >= 40);
    // Every row is run; the mismatches are reported together.
    const mismatches: string[] = [];
    for (const shape of ['deny', 'allow'] as const) {
      for (const row of ROWS) {
        const { statuses, received } = await send(shape, row.bytes);
        const want = row[shape];
        const got = { statuses, received: lines(received) };
        if (JSON.stringify(got) !== JSON.stringify(want))
          mismatches.push(`${shape}: ${row.name}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
        if (row.body !== undefined && received[0] && received[0].body !== row.body)
          mismatches.push(`${shape}: ${row.name}: body ${JSON.stringify(received[0].body)}`);
      }
    }
    t.deepEqual(mismatches, []);
  },
);

for (const shape of ['deny', 'allow'] as const) {
  test.serial(
    `${shape}: over HTTP/2 a host that differs from :authority is refused, never routed`,
    async (t) => {
      mesh.waypoint.setConfig(configs[shape]);
      received.length = 0;
      const session = http2.connect(`http://${mesh.ip.client}:${mesh.port.client}`);
      try {
        for (const path of ['/admin', '/public']) {
          const res = await h2Request(session, { ':path': path, ':authority': HOST, host: 'other.example' });
          t.is(res.status, 400, `${path} with host other.example`);
        }
        const admin = await h2Request(session, { ':path': '/admin', ':authority': HOST });
        t.is(admin.status, 403);
      } finally {
        session.close();
      }
      // (The recording apps speak HTTP/1.1 only, so nothing over h2 is sent on to them here.)
      t.deepEqual(lines(received), [], 'nothing reached an app');
    },
  );

  test.serial(`${shape}: an absolute-form target is policy-checked and sent as its path`, async (t) => {
    t.deepEqual((await send(shape, req(`GET http://${HOST}/admin HTTP/1.1`, [close]))).statuses, [403]);
    t.deepEqual((await send(shape, req('GET http://evil.example/admin HTTP/1.1', [close]))).statuses, [400]);
    const pub = await send(shape, req(`GET http://${HOST}/public HTTP/1.1`, [close]));
    t.deepEqual(pub.statuses, [200]);
    t.deepEqual(lines(pub.received), ['GET /public']);
  });

  test.serial(`${shape}: a request hidden in a body reaches the app only as that body`, async (t) => {
    for (const method of ['GET', 'DELETE', 'HEAD', 'OPTIONS']) {
      const r = await send(
        shape,
        req(`${method} /public HTTP/1.1`, ['Transfer-Encoding: chunked', close], chunked(SMUGGLED)),
      );
      t.deepEqual(lines(r.received), [`${method} /public`], method);
      t.is(r.received[0]?.body, SMUGGLED, method);
    }
    const named = await send(
      shape,
      req(
        'GET /public HTTP/1.1',
        [`Content-Length: ${SMUGGLED.length}`, 'Connection: content-length'],
        SMUGGLED,
      ),
    );
    t.deepEqual(named.statuses, [400]);
    t.deepEqual(named.received, []);
  });

  test.serial(
    `${shape}: an upgrade the app did not accept leaves the connection HTTP, judged request by request`,
    async (t) => {
      for (const protocol of ['websocket', 'echo']) {
        const r = await send(
          shape,
          req('GET /public HTTP/1.1', ['Connection: Upgrade', `Upgrade: ${protocol}`]) +
            req('GET /admin HTTP/1.1', [close]),
        );
        t.deepEqual(r.statuses, [200, 403], protocol);
        t.deepEqual(lines(r.received), ['GET /public'], protocol);
      }
      const h2c = await send(shape, req('GET /public HTTP/1.1', ['Connection: Upgrade', 'Upgrade: h2c']));
      t.deepEqual(h2c.statuses, [400]);
      t.deepEqual(h2c.received, []);
    },
  );

  test.serial(`${shape}: dot segments, encodings and backslashes are normalized before policy`, async (t) => {
    const attempts = [
      '/./admin',
      '/%2e/admin',
      '/%61dmin',
      '/public/../admin',
      '/public/%2e%2e/admin',
      '/public\\..\\admin',
    ];
    for (const path of attempts) {
      const r = await send(shape, req(`GET ${path} HTTP/1.1`, [close]));
      t.deepEqual(r.statuses, [403], path);
      t.deepEqual(r.received, [], path);
    }
    const params = await send(shape, req('GET /public/..;/admin HTTP/1.1', [close]));
    t.deepEqual(params.statuses, [400]);
    const normalized = await send(shape, req('GET /public/x/%2e%2e/%79 HTTP/1.1', [close]));
    t.deepEqual(lines(normalized.received), ['GET /public/y']);
  });
}

test.serial('refusals are counted by reason in zmesh_waypoint_bad_requests_total', async (t) => {
  await send('deny', req('GET http://evil.example/admin HTTP/1.1', [close]));
  const text = await mesh.waypoint.metrics.registry.metrics();
  t.regex(text, /zmesh_waypoint_bad_requests_total\{protocol="http1",reason="target_authority"\} [1-9]/);
  t.regex(text, /zmesh_waypoint_bad_requests_total\{protocol="http1",reason="path_dot_parameter"\} [1-9]/);
  t.regex(text, /zmesh_waypoint_bad_requests_total\{protocol="http1",reason="h2c_upgrade"\} [1-9]/);
});
