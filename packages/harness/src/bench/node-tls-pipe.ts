/**
 * One side of the bench's "node:tls pipe pair": what Node itself costs as an mTLS proxy.
 * Like the stunnel4 pair, one TLS 1.3 connection per client connection, certificates
 * presented and verified both ways; unlike zmesh, no HTTP/2, no attribution, no tenancy,
 * no metrics. Each connection is two `pipe()`s, as a Node developer would write it. Run by
 * `zmesh bench` as `node node-tls-pipe.js --side client|server --cert F --key F --ca F
 * --route LISTEN=TO...` (host:port each); it imports nothing but Node's own modules, so
 * its memory is Node's too.
 */
import { readFileSync } from 'node:fs';
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
  },
});
if ((values.side !== 'client' && values.side !== 'server') || !values.cert || !values.key || !values.ca) {
  console.error('usage: node-tls-pipe --side client|server --cert F --key F --ca F --route LISTEN=TO...');
  process.exit(2);
}
const creds = {
  cert: readFileSync(values.cert),
  key: readFileSync(values.key),
  ca: readFileSync(values.ca),
  minVersion: 'TLSv1.3' as const,
};
for (const route of values.route ?? []) {
  const [listen, to] = route.split('=').map(hostPort);
  if (!listen || !to) throw new Error(`not LISTEN=TO: ${route}`);
  if (values.side === 'client') {
    tcpServer({ allowHalfOpen: true }, (app) => {
      // The chain is verified against the CA; the peer's name is a SPIFFE URI, as in the
      // stunnel4 pair (verifyChain, no host check).
      const tunnel = tlsConnect({ ...to, ...creds, checkServerIdentity: () => undefined });
      splice(app, tunnel);
    }).listen({ ...listen, backlog: 4096 });
  } else {
    tlsServer({ ...creds, requestCert: true, rejectUnauthorized: true, allowHalfOpen: true }, (tunnel) => {
      splice(tunnel, tcpConnect({ ...to, allowHalfOpen: true }));
    }).listen({ ...listen, backlog: 4096 });
  }
}
