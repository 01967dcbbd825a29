/**
 * One side of the bench's "node:tls pipe pair": what Node itself costs as an mTLS proxy.
 * Like the stunnel4 pair, one TLS 1.3 connection per client connection, certificates
 * presented and verified both ways; unlike zmesh, no HTTP/2, no attribution, no tenancy,
 * no metrics. Each connection is two `pipe()`s, as a Node developer would write it. Run by
 * `zmesh bench` as `node node-tls-pipe.js --side client|server|hop --cert F --key F --ca F
 * --route LISTEN=TO... [--http-route LISTEN=TO...]` (host:port each); it imports nothing
 * but Node's own modules, so its memory is Node's too.
 *
 * `--side hop` is the L7 hop between a pair (where the waypoint sits on zmesh's waypoint
 * path): mTLS in and out; an `--http-route` is served as HTTP/1.1 by `node:https`, each
 * request sent on through a keep-alive `https.Agent`, a `--route` is piped as bytes (the
 * waypoint too carries opaque TCP at L4).
 */
import { readFileSync } from 'node:fs';
import { Agent as HttpsAgent, request as httpsRequest, createServer as httpsServer } from 'node:https';
import { type Socket, connect as tcpConnect, createServer as tcpServer } from 'node:net';
import { connect as tlsConnect, createServer as tlsServer } from 'node:tls';
import { parseArgs } from 'node:util';

interface HostPort {
  host: string;
  port: number;
}

function hostPort(s: string): HostPort {
  const at = s.lastIndexOf(':');
  const port = Number(s.slice(at + 1));
  if (at < 1 || !Number.isInteger(port)) throw new Error(`not host:port: ${s}`);
  return { host: s.slice(0, at), port };
}

/** Both ways, half-close passed on; either side failing or closing ends the other. */
function splice(a: Socket, b: Socket): void {
  a.setNoDelay(true);
  b.setNoDelay(true);
  a.pipe(b);
  b.pipe(a);
  for (const [s, other] of [
    [a, b],
    [b, a],
  ] as const) {
    s.on('error', () => other.destroy());
    s.on('close', () => other.destroy());
  }
}

const { values } = parseArgs({
  options: {
    side: { type: 'string' },
    cert: { type: 'string' },
    key: { type: 'string' },
    ca: { type: 'string' },
    route: { type: 'string', multiple: true },
    'http-route': { type: 'string', multiple: true },
  },
});
const side = values.side;
if ((side !== 'client' && side !== 'server' && side !== 'hop') || !values.cert || !values.key || !values.ca) {
  console.error(
    'usage: node-tls-pipe --side client|server|hop --cert F --key F --ca F --route LISTEN=TO... [--http-route LISTEN=TO...]',
  );
  process.exit(2);
}
const creds = {
  cert: readFileSync(values.cert),
  key: readFileSync(values.key),
  ca: readFileSync(values.ca),
  minVersion: 'TLSv1.3' as const,
};
function routeOf(route: string): [HostPort, HostPort] {
  const [listen, to] = route.split('=').map(hostPort);
  if (!listen || !to) throw new Error(`not LISTEN=TO: ${route}`);
  return [listen, to];
}

// The chain is verified against the CA; the peer's name is a SPIFFE URI, as in the
// stunnel4 pair (verifyChain, no host check).
const asClient = { ...creds, checkServerIdentity: () => undefined };
const asServer = { ...creds, requestCert: true, rejectUnauthorized: true };

for (const route of values['http-route'] ?? []) {
  const [listen, to] = routeOf(route);
  if (side !== 'hop') throw new Error('--http-route is for --side hop');
  const agent = new HttpsAgent({ ...asClient, keepAlive: true, maxSockets: 64 });
  httpsServer(asServer, (req, res) => {
    const up = httpsRequest(
      { ...to, agent, method: req.method, path: req.url, headers: req.headers },
      (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      },
    );
    up.on('error', () => res.destroy());
    req.pipe(up);
  }).listen({ ...listen, backlog: 4096 });
}

for (const route of values.route ?? []) {
  const [listen, to] = routeOf(route);
  if (side === 'hop') {
    tlsServer({ ...asServer, allowHalfOpen: true }, (down) => {
      splice(down, tlsConnect({ ...to, ...asClient }));
    }).listen({ ...listen, backlog: 4096 });
  } else if (side === 'client') {
    tcpServer({ allowHalfOpen: true }, (app) => {
      const tunnel = tlsConnect({ ...to, ...asClient });
      splice(app, tunnel);
    }).listen({ ...listen, backlog: 4096 });
  } else {
    tlsServer({ ...asServer, allowHalfOpen: true }, (tunnel) => {
      splice(tunnel, tcpConnect({ ...to, allowHalfOpen: true }));
    }).listen({ ...listen, backlog: 4096 });
  }
}
