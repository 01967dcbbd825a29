import * as http from 'node:http';
import * as http2 from 'node:http2';
import { duplexPair } from 'node:stream';
import { CertificateAuthority, HboneServer, TrustBundle, type Workload } from '@zmesh/shared';
import test from 'ava';
import type { Endpoint } from '../config/config-view.js';
import { TunnelPool } from './tunnel-pool.js';
import { type ConnectionCounter, UpstreamSet } from './upstream-set.js';

const counter: ConnectionCounter = {
  name: 'team-b/server',
  connectionLimit: 100,
  pendingLimit: 100,
  tryOpenConnection: () => true,
  connectionClosed: () => {},
  admitPending: () => ({ ok: true, release: () => {} }),
};

/**
 * Each downstream connection has its own UpstreamSet; when the client closes, the set's idle
 * upstream connection must end with END_STREAM, not RST_STREAM. The endpoint's ztunnel counts
 * every reset (rapid reset, CVE-2023-44487) and closes the HBONE session past its limit:
 * with resets, one per client connection, a waypoint serving clients that do not keep their
 * connections alive lost the session to each endpoint at 100 connections a second. Here the
 * endpoint's limit is 3 resets, and 8 downstream connections come and go on one session.
 */
test('a closed downstream connection ends its idle upstream tunnel, so the endpoint counts no reset', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [ca.rootPem]);
  const endpointId = 'spiffe://cluster.local/ns/team-b/sa/server';
  const app = http.createServer((req, res) => {
    req.resume();
    res.end('ok');
  });
  let appEnds = 0;
  const server = new HboneServer({
    credential: await ca.issue(endpointId, 600),
    bundle,
    rapidReset: { limit: 3, windowMs: 60_000 },
    onTunnel: async () => {
      const [outer, inner] = duplexPair();
      inner.once('end', () => appEnds++);
      app.emit('connection', inner);
      return { upstream: outer };
    },
  });
  const at = await server.listen({ host: '127.65.2.1', port: 0 });
  const credential = await ca.issue('spiffe://cluster.local/ns/team-b/sa/waypoint', 600);
  const tunnels = new TunnelPool({ credential: () => credential, bundle });
  t.teardown(async () => {
    tunnels.close();
    await server.close();
  });
  const endpoint: Endpoint = {
    workload: { trustDomain: 'cluster.local', namespace: 'team-b', serviceAccount: 'server' } as Workload,
    address: '127.65.2.1',
    port: 7000,
    key: '127.65.2.1:7000',
  };
  for (let i = 0; i < 8; i++) {
    const set = new UpstreamSet({ tunnels, hbonePort: at.port, tunnelHeaders: {} });
    const agent = set.agent(endpoint, counter);
    const body = await new Promise<string>((resolve, reject) => {
      const req = http.request(
        { agent, host: endpoint.address, port: endpoint.port, path: `/${i}` },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            text += c;
          });
          res.on('end', () => setImmediate(() => resolve(text)));
        },
      );
      req.on('error', reject);
      req.end();
    });
    t.is(body, 'ok', `downstream connection ${i}`);
    t.is(Object.values(agent.freeSockets).flat().length, 1, 'the upstream connection is idle, kept alive');
    set.close();
  }
  t.is(tunnels.sessionCount(), 1, 'one HBONE session throughout: never closed as a flood');
  const deadline = Date.now() + 5000;
  while (appEnds < 8 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  t.is(appEnds, 8, 'each app connection saw its client end, as a closed TCP connection');
});

test('the same for an idle upstream HTTP/2 session: closed with GOAWAY and END_STREAM, no reset', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [ca.rootPem]);
  const app = http2.createServer((_req, res) => res.end('ok'));
  let appEnds = 0;
  const server = new HboneServer({
    credential: await ca.issue('spiffe://cluster.local/ns/team-b/sa/server', 600),
    bundle,
    rapidReset: { limit: 3, windowMs: 60_000 },
    onTunnel: async () => {
      const [outer, inner] = duplexPair();
      inner.once('end', () => appEnds++);
      app.emit('connection', inner);
      return { upstream: outer };
    },
  });
  const at = await server.listen({ host: '127.65.2.2', port: 0 });
  const credential = await ca.issue('spiffe://cluster.local/ns/team-b/sa/waypoint', 600);
  const tunnels = new TunnelPool({ credential: () => credential, bundle });
  t.teardown(async () => {
    tunnels.close();
    await server.close();
  });
  const endpoint: Endpoint = {
    workload: { trustDomain: 'cluster.local', namespace: 'team-b', serviceAccount: 'server' } as Workload,
    address: '127.65.2.2',
    port: 7000,
    key: '127.65.2.2:7000',
  };
  for (let i = 0; i < 8; i++) {
    const set = new UpstreamSet({ tunnels, hbonePort: at.port, tunnelHeaders: {} });
    const { session, done } = await set.h2Session(endpoint, counter);
    const body = await new Promise<string>((resolve, reject) => {
      const req = session.request({ ':path': `/${i}` });
      let text = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        text += c;
      });
      req.on('end', () => resolve(text));
      req.on('error', reject);
      req.end();
    });
    done();
    t.is(body, 'ok', `downstream connection ${i}`);
    set.close();
  }
  t.is(tunnels.sessionCount(), 1, 'one HBONE session throughout: never closed as a flood');
  const deadline = Date.now() + 5000;
  while (appEnds < 8 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  t.is(appEnds, 8);
});
