import test from 'ava';
import { h1Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * `hosts` and `notHosts` of an L7 AuthorizationPolicy through the real path (client → source
 * ztunnel → waypoint → destination ztunnel → app), decided on the Host the client sends as
 * Istio decides it: case-insensitive; a policy host without a port matches that host with
 * any port or none; one with a port matches only that port; `*.` and `*` forms are suffix
 * and prefix matches. The unit cases are in packages/waypoint/src/authz/l7-authorizer.test.ts.
 */

const BLOCK = 157;

let mesh: WaypointMesh;

const TARGET = (name: string) => `
  - name: ${name}
    namespace: team-b
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]`;

test.before(async () => {
  mesh = await startWaypointMesh(BLOCK);
});

test.after.always(async () => {
  await mesh?.stop();
});

const status = async (host: string) =>
  (await h1Request(mesh.ip.client, mesh.port.client, { path: '/', headers: { host } })).status;

async function expect(t: import('ava').ExecutionContext, table: Array<[string, number]>) {
  for (const [host, want] of table) t.is(await status(host), want, `Host: ${host}`);
}

test.serial('ALLOW on hosts: with and without a port, any case, suffix form', async (t) => {
  mesh.waypoint.setConfig(
    mesh.config(`
authorizationPolicies:${TARGET('allow-hosts')}
    action: ALLOW
    rules:
      - to: [{ operation: { hosts: ["server", "api.example.com:8080", "*.shop.example"] } }]
`),
  );
  await expect(t, [
    ['server', 200],
    ['server:80', 200], // no port in the policy: any port
    ['SERVER:80', 200], // case-insensitive
    ['api.example.com:8080', 200],
    ['API.example.COM:8080', 200],
    ['api.example.com', 403], // a port in the policy: that port only
    ['api.example.com:9090', 403],
    ['www.shop.example', 200],
    ['www.shop.example:443', 200],
    ['shop.example', 403], // `*.shop.example` needs a label before
    ['server.evil', 403],
    ['other', 403],
  ]);
});

test.serial('DENY on hosts and on notHosts', async (t) => {
  mesh.waypoint.setConfig(
    mesh.config(`
authorizationPolicies:${TARGET('deny-admin-host')}
    action: DENY
    rules:
      - to: [{ operation: { hosts: ["admin.example"] } }]
`),
  );
  await expect(t, [
    ['admin.example', 403],
    ['admin.example:80', 403],
    ['Admin.Example:8080', 403],
    ['admin.example.org', 200],
    ['server', 200],
  ]);
  mesh.waypoint.setConfig(
    mesh.config(`
authorizationPolicies:${TARGET('deny-not-server')}
    action: DENY
    rules:
      - to: [{ operation: { notHosts: ["server", "server.team-b.svc.cluster.local:80"] } }]
`),
  );
  await expect(t, [
    ['server', 200],
    ['server:80', 200],
    ['server.team-b.svc.cluster.local:80', 200],
    ['server.team-b.svc.cluster.local', 403], // listed only with :80
    ['server.team-b.svc.cluster.local:81', 403],
    ['elsewhere', 403],
  ]);
});
