import test from 'ava';
import { h1Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * remote.ip and remoteIpBlocks through the real path (client → source ztunnel → waypoint →
 * destination ztunnel → app) with Istio's numTrustedProxies: by default X-Forwarded-For is
 * not believed, so a client that writes someone else's address in it changes nothing; with N
 * hops trusted the Nth address from the right decides, and too few entries or a non-address
 * fall back to the source. ipBlocks and source.ip read the source either way.
 */

const BLOCK = 148;
const PARTNER = '198.51.100.0/24';
const BANNED = '203.0.113.0/24';

let mesh: WaypointMesh;

const TARGET = (name: string) => `
  - name: ${name}
    namespace: team-b
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]`;

const policies = (ip: WaypointMesh['ip']) => `
authorizationPolicies:${TARGET('allow')}
    action: ALLOW
    rules:
      - to: [{ operation: { paths: ["/open*"] } }]
      - from: [{ source: { remoteIpBlocks: ["${PARTNER}"] } }]
        to: [{ operation: { paths: ["/partner*"] } }]
      - from: [{ source: { remoteIpBlocks: ["${ip.client}/32"] } }]
        to: [{ operation: { paths: ["/client*"] } }]
      - from: [{ source: { ipBlocks: ["${ip.client}/32"] } }]
        to: [{ operation: { paths: ["/source*"] } }]
${TARGET('deny-banned')}
    action: DENY
    rules:
      - from: [{ source: { remoteIpBlocks: ["${BANNED}"] } }]
      - when: [{ key: remote.ip, values: ["192.0.2.0/24"] }]
`;

test.before(async () => {
  mesh = await startWaypointMesh(BLOCK);
  mesh.waypoint.setConfig(mesh.config(policies(mesh.ip)));
});

test.after.always(async () => {
  await mesh?.stop();
});

async function trusting(hops: number): Promise<void> {
  await mesh.waypoint.stop();
  mesh.waypoint = await mesh.startWaypoint(mesh.config(policies(mesh.ip)), { numTrustedProxies: hops });
}

const get = async (path: string, xff?: string, from: 'client' | 'intruder' = 'client') =>
  (
    await h1Request(mesh.ip[from], mesh.port[from], {
      path,
      headers: xff === undefined ? {} : { 'x-forwarded-for': xff },
    })
  ).status;

test.serial(
  'no proxy trusted (default): remote.ip is the source; a spoofed X-Forwarded-For changes nothing',
  async (t) => {
    t.is(await get('/client'), 200, 'the client is its own remote.ip');
    t.is(await get('/client', undefined, 'intruder'), 403);
    t.is(await get('/client', mesh.ip.client, 'intruder'), 403, "the intruder writes the client's address");
    t.is(
      await get('/partner', '198.51.100.7'),
      403,
      'nor does the client get the partner range by claiming it',
    );
    t.is(await get('/open', '203.0.113.9'), 200, 'a banned address in the header is not the remote');
    t.is(await get('/open', '192.0.2.5'), 200);
    for (const a of [mesh.apps.v1, mesh.apps.v2]) delete a.last;
    t.is(await get('/open', '198.51.100.7'), 200);
    const seen = mesh.apps.v1.last ?? mesh.apps.v2.last;
    t.is(
      seen?.['x-forwarded-for'],
      `198.51.100.7, ${mesh.ip.client}`,
      'the header still goes on, this hop appended',
    );
  },
);

test.serial(
  'one proxy trusted: the last X-Forwarded-For entry is remote.ip; too few or garbage falls back to the source',
  async (t) => {
    await trusting(1);
    t.is(await get('/partner', '198.51.100.7'), 200);
    t.is(
      await get('/partner', '198.51.100.7', 'intruder'),
      200,
      'remoteIpBlocks read the header, not the source',
    );
    t.is(await get('/partner', '198.51.100.7, 10.0.0.1'), 403, 'only the trusted hop’s entry counts');
    t.is(await get('/partner'), 403, 'no header: the source');
    t.is(await get('/client'), 200, 'no header: the source');
    t.is(await get('/client', 'not-an-address'), 200, 'not an address: the source');
    t.is(await get('/client', '10.9.9.9'), 403, 'the header names another remote');
    t.is(await get('/open', '203.0.113.9'), 403, 'DENY remoteIpBlocks');
    t.is(await get('/open', '192.0.2.5'), 403, 'DENY when remote.ip');
    t.is(
      await get('/open', `203.0.113.9, ${mesh.ip.client}`),
      200,
      'a banned address left of the trusted entry',
    );
    t.is(await get('/source', mesh.ip.client, 'intruder'), 403, 'ipBlocks stay on the source');
    t.is(await get('/source', '10.9.9.9'), 200);
  },
);

test.serial('two proxies trusted: the second entry from the right', async (t) => {
  await trusting(2);
  t.is(await get('/partner', '198.51.100.7, 10.0.0.1'), 200);
  t.is(await get('/partner', '10.0.0.1, 198.51.100.7'), 403);
  t.is(await get('/partner', '198.51.100.7'), 403, 'one entry for two hops: the source');
  t.is(await get('/open', '203.0.113.9, 10.0.0.1'), 403);
});
