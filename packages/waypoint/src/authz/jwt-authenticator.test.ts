import { createHmac } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jwksUriRefusal } from '@zmesh/shared';
import test from 'ava';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { parseWaypointConfig } from '../config/config-parser.js';
import type { JwtRule } from '../config/waypoint-config.js';
import { JwtAuthenticator } from './jwt-authenticator.js';

const ISS = 'https://idp.example';
const keys = await generateKeyPair('RS256', { extractable: true });
const other = await generateKeyPair('ES256', { extractable: true });
const pub: JWK = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'RS256' };

const rule = (extra: Partial<JwtRule> = {}): JwtRule => ({
  issuer: ISS,
  audiences: ['shop'],
  jwks: { keys: [pub as Record<string, unknown>] },
  timeoutMs: 1000,
  from: [{ header: 'authorization', prefix: 'Bearer ' }, { param: 'access_token' }],
  forwardOriginalToken: false,
  outputClaimToHeaders: [],
  ...extra,
});

const now = () => Math.floor(Date.now() / 1000);
function sign(
  claims: Record<string, unknown> = {},
  key = keys.privateKey,
  header = { alg: 'RS256', kid: 'k1' },
) {
  return new SignJWT({ iss: ISS, sub: 'alice', aud: 'shop', exp: now() + 600, ...claims })
    .setProtectedHeader(header)
    .sign(key);
}
const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

const authn = new JwtAuthenticator(() => undefined);
const bearer = (token: string, query = '') => ({
  header: (n: string) => (n === 'authorization' ? `Bearer ${token}` : undefined),
  query,
});
const reasonOf = async (token: string, r = rule()) => {
  const out = await authn.authenticate([r], bearer(token));
  return out.kind === 'invalid' ? out.reason : out.kind;
};

test('a valid token yields iss/sub, and is stripped before the app unless forwardOriginalToken', async (t) => {
  const out = await authn.authenticate([rule({ outputPayloadToHeader: 'x-jwt' })], bearer(await sign()));
  if (out.kind !== 'valid') return t.fail(JSON.stringify(out));
  t.is(out.auth.principal, `${ISS}/alice`);
  t.deepEqual(out.auth.audiences, ['shop']);
  t.deepEqual(out.edits.remove, ['authorization']);
  t.is(JSON.parse(Buffer.from(out.edits.set['x-jwt']!, 'base64url').toString()).sub, 'alice');
  const kept = await authn.authenticate([rule({ forwardOriginalToken: true })], bearer(await sign()));
  t.deepEqual(kept.kind === 'valid' ? kept.edits.remove : undefined, []);
});

test('no token anywhere is not an error; a non-Bearer Authorization is no token', async (t) => {
  t.is((await authn.authenticate([rule()], { header: () => undefined, query: '' })).kind, 'none');
  t.is((await authn.authenticate([rule()], { header: () => 'Basic YTpi', query: 'x=1' })).kind, 'none');
  t.is((await authn.authenticate([], bearer('garbage'))).kind, 'none', 'no rules: nothing checked');
});

test('every failure is invalid, with Envoy’s reason', async (t) => {
  t.is(await reasonOf(await sign({ exp: now() - 3600 })), 'Jwt is expired');
  t.is(await reasonOf(await sign({ nbf: now() + 3600 })), 'Jwt not yet valid');
  t.is(await reasonOf(await sign({ iss: 'https://evil' })), 'Jwt issuer is not configured');
  t.is(await reasonOf(await sign({ aud: 'other' })), 'Audiences in Jwt are not allowed');
  t.is(
    await reasonOf(await sign({}, other.privateKey, { alg: 'ES256', kid: 'k1' })),
    'Jwks doesn’t have key to match kid or alg from Jwt',
  );
  const forged = await sign({}, (await generateKeyPair('RS256')).privateKey);
  t.is(await reasonOf(forged), 'Jwt verification fails');
  t.is(await reasonOf('not.a.jwt'), 'Jwt is not in the form of Header.Payload.Signature');
  // alg none, and HS256 keyed with the public key's bytes (the classic confusion).
  const payload = { iss: ISS, sub: 'alice', aud: 'shop', exp: now() + 600 };
  t.is(await reasonOf(`${b64({ alg: 'none' })}.${b64(payload)}.`), 'Jwt algorithm is not allowed');
  const input = `${b64({ alg: 'HS256', kid: 'k1' })}.${b64(payload)}`;
  const mac = createHmac('sha256', JSON.stringify(pub)).update(input).digest('base64url');
  t.is(await reasonOf(`${input}.${mac}`), 'Jwt algorithm is not allowed');
  t.is(
    await reasonOf(await sign({ aud: undefined }), rule({ audiences: [] })),
    'valid',
    'no audiences: no check',
  );
});

test('a token in ?access_token= is read and removed; one good and one forged token is refused', async (t) => {
  const token = await sign();
  const out = await authn.authenticate([rule()], {
    header: () => undefined,
    query: `a=1&access_token=${token}`,
  });
  t.deepEqual(out.kind === 'valid' ? out.edits.removeParams : undefined, ['access_token']);
  const forged = await sign({}, (await generateKeyPair('RS256')).privateKey);
  t.is((await authn.authenticate([rule()], bearer(token, `access_token=${forged}`))).kind, 'invalid');
});

const RA = (jwtRule: string) => `
waypoint: { name: waypoint, namespace: ns }
requestAuthentications:
  - name: jwt
    targetRefs: [{ kind: Gateway, name: waypoint }]
    jwtRules: [${jwtRule}]
`;

test('RequestAuthentication is checked where the config is decoded: defaults, and every refusal named', (t) => {
  const ok = parseWaypointConfig(RA(`{ issuer: x, jwksUri: "http://127.0.0.1:9/jwks" }`), 'f');
  if (!ok.ok) return t.fail(ok.error.join('\n'));
  t.like(ok.value.requestAuthentications[0]!.rules[0], {
    issuer: 'x',
    audiences: [],
    timeoutMs: 5000,
    forwardOriginalToken: false,
    from: [{ header: 'authorization', prefix: 'Bearer ' }, { param: 'access_token' }],
  });
  const jwks = JSON.stringify(JSON.stringify({ keys: [pub] }));
  t.true(parseWaypointConfig(RA(`{ issuer: x, jwks: ${jwks}, fromHeaders: [{ name: X-Jwt }] }`), 'f').ok);
  const refused = (yaml: string) => {
    const r = parseWaypointConfig(RA(yaml), 'f');
    return r.ok ? '' : r.error.join('\n');
  };
  t.regex(refused('{ issuer: x }'), /set jwks or jwksUri/);
  t.regex(refused('{ issuer: x, jwksUri: "https://idp.example.com/jwks" }'), /outside the mesh/);
  t.regex(refused('{ issuer: x, jwksUri: "http://10.0.0.1/jwks" }'), /outside the mesh/);
  t.regex(refused('{ issuer: x, jwks: "{" }'), /jwks: is not JSON/);
  t.regex(refused(`{ issuer: x, jwks: '{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}' }`), /symmetric/);
  t.regex(
    refused('{ issuer: x, jwksUri: "http://127.0.0.1/k", fromCookies: [s] }'),
    /fromCookies: unknown field/,
  );
  t.regex(refused('{ jwksUri: "http://127.0.0.1/k" }'), /issuer: must be a non-empty string/);
});

test('jwksUri: loopback and mesh service names only', (t) => {
  t.is(jwksUriRefusal('http://127.0.0.1:8080/jwks'), undefined);
  t.is(jwksUriRefusal('http://[::1]/jwks'), undefined);
  t.is(jwksUriRefusal('http://localhost/jwks'), undefined);
  t.is(jwksUriRefusal('http://keys.auth.svc.cluster.local/jwks'), undefined);
  t.regex(jwksUriRefusal('http://169.254.169.254/latest') ?? '', /outside the mesh/);
  t.regex(jwksUriRefusal('http://example.com/jwks') ?? '', /outside the mesh/);
  t.regex(jwksUriRefusal('file:///etc/passwd') ?? '', /http/);
  t.regex(jwksUriRefusal('http://u:p@127.0.0.1/') ?? '', /credentials/);
});

test('a jwksUri fetch is bounded: too big, too slow, or not 200 fails the token, never hangs', async (t) => {
  const hold: ServerResponse[] = [];
  const server = createServer((req, res) => {
    if (req.url === '/big') res.end(JSON.stringify({ keys: [pub], pad: 'x'.repeat(100_000) }));
    else if (req.url === '/slow') hold.push(res);
    else if (req.url === '/redirect') res.writeHead(302, { location: 'http://example.com/' }).end();
    else res.end(JSON.stringify({ keys: [pub] }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const remote = (path: string) =>
    rule({ jwks: undefined, jwksUri: `http://127.0.0.1:${port}${path}`, timeoutMs: 300 });
  const fresh = new JwtAuthenticator(() => undefined);
  try {
    const token = await sign();
    t.is(await reasonOf(token, remote('/ok')), 'valid');
    const big = await fresh.authenticate([remote('/big')], bearer(token));
    t.regex(big.kind === 'invalid' ? big.reason : big.kind, /over 65536 bytes/);
    const started = Date.now();
    const slow = await fresh.authenticate([remote('/slow')], bearer(token));
    t.is(slow.kind === 'invalid' ? slow.reason : slow.kind, 'Jwks remote fetch timed out');
    t.true(Date.now() - started < 2000);
    const moved = await fresh.authenticate([remote('/redirect')], bearer(token));
    t.regex(moved.kind === 'invalid' ? moved.reason : moved.kind, /answered 302/);
  } finally {
    for (const res of hold) res.destroy();
    server.close();
  }
});

test('a jwksUri naming a mesh service is fetched from that service’s address, cached, and refreshed after its max age', async (t) => {
  let fetches = 0;
  const hosts: string[] = [];
  const server = createServer((req, res) => {
    fetches++;
    hosts.push(String(req.headers.host));
    res.end(JSON.stringify({ keys: [pub] }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const asked: string[] = [];
  // The waypoint's resolver: the service's address in the active config, never DNS.
  const mesh = new JwtAuthenticator(
    (host) => {
      asked.push(host);
      return host === 'keys.auth.svc.cluster.local' ? '127.0.0.1' : undefined;
    },
    { cacheMaxAgeMs: 300, cooldownMs: 0 },
  );
  const remote = rule({ jwks: undefined, jwksUri: `http://keys.auth.svc.cluster.local:${port}/jwks` });
  try {
    const token = await sign();
    const first = await mesh.authenticate([remote], bearer(token));
    t.is(first.kind, 'valid');
    t.deepEqual(asked, ['keys.auth.svc.cluster.local']);
    t.deepEqual(hosts, [`keys.auth.svc.cluster.local:${port}`], 'sent with the service’s name as Host');
    t.is((await mesh.authenticate([remote], bearer(token))).kind, 'valid');
    t.is(fetches, 1, 'cached');
    await new Promise((r) => setTimeout(r, 400));
    t.is((await mesh.authenticate([remote], bearer(token))).kind, 'valid');
    t.is(fetches, 2, 'refetched once the cached set is older than cacheMaxAgeMs');
    const unknown = rule({ jwks: undefined, jwksUri: `http://keys.other.svc.cluster.local:${port}/jwks` });
    const out = await mesh.authenticate([unknown], bearer(token));
    t.regex(out.kind === 'invalid' ? out.reason : out.kind, /not in the mesh|Jwks/);
  } finally {
    server.close();
  }
});
