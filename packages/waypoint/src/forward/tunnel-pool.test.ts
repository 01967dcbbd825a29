import { PassThrough } from 'node:stream';
import { CertificateAuthority, HboneServer, TrustBundle, type TunnelRequest } from '@zmesh/shared';
import test from 'ava';
import { TunnelPool } from './tunnel-pool.js';

/** A stand-in for an endpoint's ztunnel on 127.65.0.1: records each CONNECT and echoes. */
test('tunnels carry the waypoint identity, the endpoint authority and forwarded: for=<original source>', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [ca.rootPem]);
  const waypointId = 'spiffe://cluster.local/ns/team-b/sa/waypoint';
  const endpointId = 'spiffe://cluster.local/ns/team-b/sa/server';
  const seen: TunnelRequest[] = [];
  const server = new HboneServer({
    credential: await ca.issue(endpointId, 600),
    bundle,
    onTunnel: async (req) => {
      seen.push(req);
      const echo = new PassThrough();
      return { upstream: echo };
    },
  });
  const at = await server.listen({ host: '127.65.0.1', port: 0 });
  const pool = new TunnelPool({ credential: () => credential, bundle });
  const credential = await ca.issue(waypointId, 600);
  const target = { address: '127.65.0.1', hbonePort: at.port, identity: endpointId };
  const tunnels = await Promise.all(
    Array.from({ length: 3 }, () =>
      pool.open(target, {
        authority: '127.65.0.1:7000',
        forwardedFor: '127.61.1.1:40000',
        traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`,
      }),
    ),
  );
  t.is(pool.sessionCount(), 1, 'one HBONE connection for the burst');
  t.is(seen.length, 3);
  for (const req of seen) {
    t.is(req.peerIdentity, waypointId);
    t.is(req.request.forwardedFor, '127.61.1.1:40000');
    t.is(`${req.request.authority.host}:${req.request.authority.port}`, '127.65.0.1:7000');
  }
  const back = await new Promise<string>((resolve) => {
    tunnels[0]!.once('data', (c: Buffer) => resolve(c.toString()));
    tunnels[0]!.write('ping');
  });
  t.is(back, 'ping');
  for (const tunnel of tunnels) tunnel.destroy();
  await t.throwsAsync(
    pool.open(
      { ...target, identity: 'spiffe://cluster.local/ns/team-b/sa/impostor' },
      { authority: '127.65.0.1:7000' },
    ),
    {
      message: /not one of the expected identities|peer identity/,
    },
  );
  pool.close();
  await server.close();
});
