import { createServer, type Server } from 'node:http';
import type { Logger } from '@zmesh/shared';
import test from 'ava';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { h1Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * RequestAuthentication and the L7 AuthorizationPolicy fields that read it, through the
 * real path: client → source ztunnel → waypoint → destination ztunnel → app. The JWKS is
 * served on loopback (a jwksUri may name only loopback or a mesh service) and rotated
 * during the run.
 */

const BLOCK = 77;
const ISS = 'https://idp.zmesh.test';
const JWKS_PORT = 9477;

type KeyPair = Awaited<ReturnType<typeof generateKeyPair>>;
const k1 = await generateKeyPair('RS256');
const k2 = await generateKeyPair('ES256');
const stranger = await generateKeyPair('RS256');
const publicJwk = async (k: KeyPair, kid: string, alg: string): Promise<JWK> => ({
  ...(await exportJWK(k.publicKey)),
  kid,
  alg,
  use: 'sig',
});
const JWK1 = await publicJwk(k1, 'k1', 'RS256');
const JWK2 = await publicJwk(k2, 'k2', 'ES256');

let served: JWK[] = [JWK1];
let fetches = 0;
let jwksServer: Server;
let mesh: WaypointMesh;
const logLines: Array<Record<string, unknown>> = [];

const now = () => Math.floor(Date.now() / 1000);
function token(
  claims: Record<string, unknown> = {},
  key = k1.privateKey,
  header = { alg: 'RS256', kid: 'k1' },
) {
  return new SignJWT({ iss: ISS, sub: 'alice', aud: 'shop', exp: now() + 600, ...claims })
    .setProtectedHeader(header)
    .sign(key);
}

const TARGET = (name: string) => `
  - name: ${name}
    namespace: team-b
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]`;

const extraYaml = (ip: WaypointMesh['ip']) => `
requestAuthentications:${TARGET('jwt')}
    jwtRules:
      - issuer: ${ISS}
        audiences: [shop]
        jwksUri: http://127.${BLOCK}.0.9:${JWKS_PORT}/jwks
        outputPayloadToHeader: x-jwt-payload
authorizationPolicies:${TARGET('require-jwt')}
    action: DENY
    rules:
      - from: [{ source: { notRequestPrincipals: ["*"] } }]
        to: [{ operation: { paths: ["/secure*"] } }]
      - from: [{ source: { requestPrincipals: ["${ISS}/mallory"] } }]
        to: [{ operation: { paths: ["/secure*"] } }]
${TARGET('admins-only')}
    action: DENY
    rules:
      - to: [{ operation: { paths: ["/claims*"] } }]
        when: [{ key: "request.auth.claims[realm][groups]", notValues: [admins] }]
${TARGET('client-ip-only')}
    action: DENY
    rules:
      - from: [{ source: { notIpBlocks: ["${ip.client}/32"] } }]
        to: [{ operation: { paths: ["/ip*"] } }]
${TARGET('audit-reports')}
    action: AUDIT
    rules:
      - to: [{ operation: { paths: ["*.csv"] } }]
`;

test.before(async () => {
  jwksServer = createServer((req, res) => {
    fetches++;
    res.writeHead(req.url === '/jwks' ? 200 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ keys: served }));
  });
  await new Promise<void>((resolve, reject) => {
    jwksServer.once('error', reject);
    jwksServer.listen(JWKS_PORT, `127.${BLOCK}.0.9`, resolve);
  });
  const accessLog = { info: (line: Record<string, unknown>) => logLines.push(line) } as unknown as Logger;
  mesh = await startWaypointMesh(BLOCK, { waypoint: { accessLog, jwks: { cooldownMs: 300 } } });
  mesh.waypoint.setConfig(mesh.config(extraYaml(mesh.ip)));
});

test.after.always(async () => {
  await mesh?.stop();
  jwksServer?.closeAllConnections();
  jwksServer?.close();
});

const get = (path: string, jwt?: string, from: 'client' | 'intruder' = 'client') =>
  h1Request(mesh.ip[from], mesh.port[from], { path, headers: jwt ? { authorization: `Bearer ${jwt}` } : {} });

const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

/** The headers of the next request an app receives. */
function nextSeen(): () => Record<string, unknown> | undefined {
  for (const a of [mesh.apps.v1, mesh.apps.v2]) delete a.last;
  return () => mesh.apps.v1.last ?? mesh.apps.v2.last;
}

test.serial('a valid token passes; the app gets its payload, not the token', async (t) => {
  const seen = nextSeen();
  const r = await get('/open', await token());
  t.is(r.status, 200, r.body);
  const last = seen();
  t.truthy(last);
  t.is(last?.authorization, undefined, 'forwardOriginalToken defaults to false: the token is stripped');
  t.is(JSON.parse(Buffer.from(String(last?.['x-jwt-payload']), 'base64url').toString()).sub, 'alice');
  t.is(fetches, 1, 'the JWKS was fetched once from loopback');
});

test.serial(
  'no token passes where no policy asks for a principal; a forged payload header is dropped',
  async (t) => {
    const seen = nextSeen();
    const r = await h1Request(mesh.ip.client, mesh.port.client, {
      path: '/open',
      headers: { 'x-jwt-payload': b64({ sub: 'root' }), 'x-keep': '1' },
    });
    t.is(r.status, 200);
    t.is(seen()?.['x-keep'], '1');
    t.is(seen()?.['x-jwt-payload'], undefined, 'only the waypoint writes the payload header');
  },
);

test.serial(
  'a token in ?access_token= is verified and removed; the other parameters reach the app as sent',
  async (t) => {
    const r = await get(`/open?a=%20b+c&access_token=${await token()}&z=1`);
    t.is(r.status, 200, r.body);
    t.is(JSON.parse(r.body).url, '/open?a=%20b+c&z=1');
    t.is((await get(`/secure?access_token=${await token({ exp: now() - 3600 })}`)).status, 401);
  },
);

test.serial('invalid tokens get 401 ZM_ERR_JWT_INVALID with Envoy’s reason', async (t) => {
  const payload = { iss: ISS, sub: 'alice', aud: 'shop', exp: now() + 600 };
  const cases: Array<[string, string, string]> = [
    ['expired', await token({ exp: now() - 3600 }), 'Jwt is expired'],
    ['not yet valid', await token({ nbf: now() + 3600 }), 'Jwt not yet valid'],
    ['wrong issuer', await token({ iss: 'https://evil.test' }), 'Jwt issuer is not configured'],
    ['wrong audience', await token({ aud: 'billing' }), 'Audiences in Jwt are not allowed'],
    ['wrong key', await token({}, stranger.privateKey), 'Jwt verification fails'],
    ['alg none', `${b64({ alg: 'none', kid: 'k1' })}.${b64(payload)}.`, 'Jwt algorithm is not allowed'],
    ['malformed', 'abc', 'Jwt is not in the form of Header.Payload.Signature'],
  ];
  const before = (await mesh.waypoint.metrics.registry.getSingleMetric('zmesh_waypoint_jwt_total')?.get())
    ?.values;
  const invalidBefore = before?.find((v) => v.labels.result === 'invalid')?.value ?? 0;
  for (const [name, jwt, reason] of cases) {
    const r = await get('/open', jwt);
    t.is(r.status, 401, name);
    t.true(r.body.includes('ZM_ERR_JWT_INVALID') && r.body.includes(reason), `${name}: ${r.body}`);
    t.regex(String(r.headers['www-authenticate']), /^Bearer realm=.*error="invalid_token"/, name);
  }
  const after = (await mesh.waypoint.metrics.registry.getSingleMetric('zmesh_waypoint_jwt_total')?.get())
    ?.values;
  t.is((after?.find((v) => v.labels.result === 'invalid')?.value ?? 0) - invalidBefore, cases.length);
  await new Promise((r) => setTimeout(r, 50));
  t.true(
    logLines.some((l) => l.status === 401 && l.flags === 'UAEX' && l.jwt_error === 'Jwt is expired'),
    'the access log shows the 401 and why',
  );
});

test.serial('requestPrincipals: /secure needs a token, and not mallory’s', async (t) => {
  t.is((await get('/secure')).status, 403);
  t.is((await get('/secure', await token())).status, 200);
  t.is((await get('/secure', await token({ sub: 'mallory' }))).status, 403);
});

test.serial('when on a nested claim', async (t) => {
  t.is((await get('/claims', await token({ realm: { groups: ['dev', 'admins'] } }))).status, 200);
  t.is((await get('/claims', await token({ realm: { groups: ['dev'] } }))).status, 403);
  t.is((await get('/claims')).status, 403, 'no token: no claim');
});

test.serial('ipBlocks read the source workload’s address', async (t) => {
  t.is((await get('/ip')).status, 200);
  t.is((await get('/ip', undefined, 'intruder')).status, 403);
});

test.serial('AUDIT marks the access log line and decides nothing', async (t) => {
  logLines.length = 0;
  t.is((await get('/reports/q3.csv')).status, 200);
  t.is((await get('/reports/q3.txt')).status, 200);
  await new Promise((r) => setTimeout(r, 50));
  const line = (p: string) => logLines.find((l) => l.path === p);
  t.is(line('/reports/q3.csv')?.audit, 'team-b/audit-reports');
  t.is(line('/reports/q3.txt')?.audit, undefined);
});

test.serial(
  'JWKS rotation: a token with the new kid refetches the key set; the removed key then fails',
  async (t) => {
    served = [JWK2];
    await new Promise((r) => setTimeout(r, 400)); // past the 300 ms refetch cooldown
    const fresh = await token({}, k2.privateKey, { alg: 'ES256', kid: 'k2' });
    const r = await get('/secure', fresh);
    t.is(r.status, 200, r.body);
    t.is(fetches, 2, 'the unknown kid caused one refetch');
    const old = await get('/secure', await token());
    t.is(old.status, 401, old.body);
    t.true(old.body.includes('kid'), old.body);
  },
);
