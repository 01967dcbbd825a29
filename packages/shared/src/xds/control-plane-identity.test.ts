import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { isZmeshError } from '../errors/zmesh-error.js';
import { CertificateAuthority } from '../identity/ca.js';
import { openControlPlaneIdentity } from './control-plane-identity.js';

async function files(t: { teardown: (f: () => Promise<void>) => void }) {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cp-identity-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'token'), 'node-token\n');
  await writeFile(join(dir, 'roots.pem'), ca.rootPem);
  await writeFile(join(dir, 'bad.pem'), 'not a certificate\n');
  return { dir, rootPem: ca.rootPem };
}

const base = { address: '127.0.0.1:1', trustDomain: 'cluster.local' };

test('reads the token and the roots, and closes what it followed', async (t) => {
  const { dir, rootPem } = await files(t);
  const id = await openControlPlaneIdentity({
    ...base,
    tokenFile: join(dir, 'token'),
    rootsFile: join(dir, 'roots.pem'),
  });
  t.is(id.token.token, 'node-token');
  t.deepEqual(id.bundle.roots(), [rootPem]);
  id.close();
});

for (const [what, token, roots, flag] of [
  ['a missing token file', 'absent', 'roots.pem', '--token-file'],
  ['roots that do not parse', 'token', 'bad.pem', '--roots-file'],
  ['a missing roots file', 'token', 'absent.pem', '--roots-file'],
] as const)
  test(`${what}: ZM_ERR_CONFIG_INVALID naming ${flag}`, async (t) => {
    const { dir } = await files(t);
    const e = await t.throwsAsync(
      openControlPlaneIdentity({ ...base, tokenFile: join(dir, token), rootsFile: join(dir, roots) }),
    );
    t.true(isZmeshError(e) && e.code === 'ZM_ERR_CONFIG_INVALID', String(e));
    t.true(e?.message.includes(flag), e?.message);
  });
