import type { Attempt, Outcome } from './attempt.js';
import { forbidden, L7_HOST, type L7Result, type PolicyShape } from './l7-target.js';

/**
 * Requests that try to get past the waypoint's L7 policy, each under both policy shapes:
 * absolute-form targets, requests hidden in bodies, upgrades the app never accepted, and
 * paths that normalize to a forbidden one. Raw HTTP/1.1 from a meshed client through its
 * ztunnel, the waypoint and the destination ztunnel; delivered when an app received a
 * request whose path (as a normalizing app would read it) the policy forbids.
 */
const req = (line: string, headers: string[] = [], body = '') =>
  `${line}\r\n${[`Host: ${L7_HOST}`, ...headers].map((h) => `${h}\r\n`).join('')}\r\n${body}`;
const SMUGGLED = `GET /admin HTTP/1.1\r\nHost: ${L7_HOST}\r\n\r\n`;
const chunked = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n0\r\n\r\n`;
const close = 'Connection: close';

const TRIES: Array<{ name: string; description: string; bytes: string }> = [
  {
    name: 'absolute-form',
    description: 'GET http://<own service>/admin (absolute-form request target)',
    bytes: req(`GET http://${L7_HOST}/admin HTTP/1.1`, [close]),
  },
  {
    name: 'absolute-form-other-host',
    description: 'GET http://evil.example/admin with the service as Host',
    bytes: req('GET http://evil.example/admin HTTP/1.1', [close]),
  },
  {
    name: 'chunked-get-body',
    description: 'GET /public with a chunked body that holds GET /admin',
    bytes: req('GET /public HTTP/1.1', ['Transfer-Encoding: chunked', close], chunked(SMUGGLED)),
  },
  {
    name: 'chunked-delete-body',
    description: 'DELETE /public with a chunked body that holds GET /admin',
    bytes: req('DELETE /public HTTP/1.1', ['Transfer-Encoding: chunked', close], chunked(SMUGGLED)),
  },
  {
    name: 'connection-content-length',
    description: 'GET /public whose Connection header names Content-Length, body GET /admin',
    bytes: req(
      'GET /public HTTP/1.1',
      [`Content-Length: ${SMUGGLED.length}`, 'Connection: content-length'],
      SMUGGLED,
    ),
  },
  {
    name: 'ignored-websocket-upgrade',
    description:
      'GET /public with Upgrade: websocket (the app ignores it), then GET /admin on the connection',
    bytes: req('GET /public HTTP/1.1', ['Connection: Upgrade', 'Upgrade: websocket']) + SMUGGLED,
  },
  {
    name: 'h2c-upgrade',
    description: 'GET /public with Upgrade: h2c, then GET /admin on the connection',
    bytes:
      req('GET /public HTTP/1.1', [
        'Connection: Upgrade, HTTP2-Settings',
        'Upgrade: h2c',
        'HTTP2-Settings: AAMAAABkAAQAAP__',
      ]) + SMUGGLED,
  },
  ...[
    '/./admin',
    '/%2e/admin',
    '/%61dmin',
    '/public/../admin',
    '/public/%2e%2e/admin',
    '/public\\..\\admin',
    '/public/..;/admin',
    '/public/%2fadmin/..%2f..%2fadmin',
  ].map((path) => ({
    name: `path ${path}`,
    description: `GET ${path}`,
    bytes: req(`GET ${path} HTTP/1.1`, [close]),
  })),
];

export function l7Attempts(): Attempt[] {
  return (['deny', 'allow'] as const).flatMap((shape) =>
    TRIES.map(
      (t): Attempt => ({
        id: `l7/${shape}/${t.name}`,
        description: `${t.description}, under ${shape === 'deny' ? 'a DENY on /admin*' : 'an ALLOW of /public* only'}`,
        expected: 'denied',
        run: async (lab) => {
          const target = await lab.l7();
          await target.use(shape);
          return judgeL7(shape, await target.send(t.bytes));
        },
      }),
    ),
  );
}

export function judgeL7(shape: PolicyShape, r: L7Result): Outcome {
  const lines = r.received.map((x) => `${x.method} ${x.url}`);
  const evidence = [
    `client got ${r.statuses.length > 0 ? r.statuses.join(', ') : 'no response'}`,
    `apps received ${lines.length > 0 ? lines.join(' | ') : 'nothing'}`,
  ];
  const delivered = r.received.find((x) => forbidden(shape, x.url));
  if (delivered) {
    evidence.push(`BYPASS: an app received ${delivered.method} ${delivered.url}, which the policy forbids`);
    return { observed: 'delivered', evidence };
  }
  // No answer at all proves nothing about policy: the lab, not the waypoint, may have failed.
  if (r.statuses.length === 0) return { observed: 'error', evidence };
  return { observed: 'denied', evidence };
}
