import { chmod, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority, TrustBundle } from '@zmesh/shared';
import test from 'ava';
import { CertManager } from './cert-manager.js';
import { toCredential } from './credential.js';
import { keptCredentials, PersistedKeys, TMPFS_MAGIC } from './persisted-keys.js';

const SHM = '/dev/shm';
const shmIsTmpfs = await import('node:fs/promises')
  .then((fs) => fs.statfs(SHM))
  .then((s) => s.type === TMPFS_MAGIC)
  .catch(() => false);
const tmpfsTest = shmIsTmpfs ? test : test.skip;
if (!shmIsTmpfs) test.skip(`persisted-key round trip skipped: ${SHM} is not tmpfs here`, () => {});

tmpfsTest(
  'keys persist 0600 on a private tmpfs and come back only while valid and under their own name',
  async (t) => {
    const dir = await mkdtemp(join(SHM, 'zmesh-keys-test-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const opened = await PersistedKeys.open(dir);
    t.true(opened.ok, opened.ok ? '' : opened.error.join('; '));
    if (!opened.ok) return;
    const keys = opened.value;
    const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
    const cred = await ca.issue('spiffe://cluster.local/ns/shop/sa/w', 600);
    await keys.save(cred);
    const back = await keys.load(cred.identity);
    t.is(back?.identity, cred.identity);
    t.is(back?.keyPem, cred.keyPem);
    t.is(await keys.load('spiffe://cluster.local/ns/shop/sa/other'), undefined);
    const files = await readdir(dir);
    t.is(files.length, 1);
    t.is((await stat(join(dir, files[0]!))).mode & 0o777, 0o600);
    t.is(await keys.prune(), 0, 'a valid key is kept at start');
    t.is(await keys.load(cred.identity, cred.notAfter.getTime()), undefined, 'expired: not loaded');
    t.is(await keys.prune(cred.notAfter.getTime()), 1, 'and deleted at the next start');
    t.deepEqual(await readdir(dir), []);

    // A file renamed to another identity's name is not that identity's key; junk is removed.
    await keys.save(cred);
    const [name] = await readdir(dir);
    const other = await ca.issue('spiffe://cluster.local/ns/shop/sa/x', 600);
    await keys.save(other);
    await rename(join(dir, name!), join(dir, `${'0'.repeat(32)}.key.json`));
    await writeFile(join(dir, `${'1'.repeat(32)}.key.json`), '{not json', { mode: 0o600 });
    t.is(await keys.prune(), 2, 'the misnamed and the unreadable file go');
    t.is((await keys.load(other.identity))?.identity, other.identity);
    t.is(await keys.load(cred.identity), undefined);
  },
);

tmpfsTest('a kept credential is used before asking the CA, only while the roots vouch for it', async (t) => {
  const dir = await mkdtemp(join(SHM, 'zmesh-keys-test-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const opened = await PersistedKeys.open(dir);
  if (!opened.ok) return t.fail(opened.error.join('; '));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const id = 'spiffe://cluster.local/ns/shop/sa/w';
  const signed: string[] = [];
  const signer = {
    sign: (csrPem: string, identity: string, ttlSeconds: number) => {
      signed.push(identity);
      return ca.signCsr(csrPem, { identity, ttlSeconds });
    },
  };
  const kept = await ca.issue(id, 600);
  await opened.value.save(kept);
  const bundle = new TrustBundle('cluster.local', [ca.rootPem]);
  const certs = new CertManager({
    signer,
    ttlSeconds: 600,
    toCredential,
    store: keptCredentials(opened.value, bundle),
  });
  t.teardown(() => certs.stop());
  const [a, b] = await Promise.all([certs.fetch(id), certs.fetch(id)]);
  t.is(a.keyPem, kept.keyPem, 'the kept key is served');
  t.is(b, a, 'a second waiter shares the one read');
  t.deepEqual(signed, [], 'the CA was not asked');

  // Under roots that no longer include the issuer, the kept key is refused and a new one is issued and kept.
  const other = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const rotated = new CertManager({
    signer: { sign: (csrPem, identity, ttlSeconds) => other.signCsr(csrPem, { identity, ttlSeconds }) },
    ttlSeconds: 600,
    toCredential,
    store: keptCredentials(opened.value, new TrustBundle('cluster.local', [other.rootPem])),
  });
  t.teardown(() => rotated.stop());
  const fresh = await rotated.fetch(id);
  t.not(fresh.keyPem, kept.keyPem);
  await new Promise((r) => setTimeout(r, 50));
  t.is((await opened.value.load(id))?.keyPem, fresh.keyPem, 'the new key replaced the old at rest');
});

test('a key directory that is not tmpfs, or is open to others, is refused with every reason', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-keys-test-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await chmod(dir, 0o755);
  const opened = await PersistedKeys.open(dir);
  t.false(opened.ok);
  if (opened.ok) return;
  t.true(opened.error.some((r) => r.includes('open to others')));
  const onTmpfs = (await import('node:fs/promises').then((fs) => fs.statfs(dir))).type === TMPFS_MAGIC;
  if (!onTmpfs) t.true(opened.error.some((r) => r.startsWith('not tmpfs')));
});
