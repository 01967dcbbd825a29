import { chmod, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import { toCredential } from '../ztunnel.js';
import { PersistedKeys, TMPFS_MAGIC } from './persisted-keys.js';

const SHM = '/dev/shm';
const shmIsTmpfs = await import('node:fs/promises')
  .then((fs) => fs.statfs(SHM))
  .then((s) => s.type === TMPFS_MAGIC)
  .catch(() => false);
const tmpfsTest = shmIsTmpfs ? test : test.skip;
if (!shmIsTmpfs) test.skip(`persisted-key round trip skipped: ${SHM} is not tmpfs here`, () => {});

tmpfsTest('keys persist 0600 on a private tmpfs and come back only while valid', async (t) => {
  const dir = await mkdtemp(join(SHM, 'zmesh-keys-test-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const opened = await PersistedKeys.open(dir);
  t.true(opened.ok, opened.ok ? '' : opened.error.join('; '));
  if (!opened.ok) return;
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const cred = await ca.issue('spiffe://cluster.local/ns/shop/sa/w', 600);
  await opened.value.save(cred);
  const [back] = await opened.value.loadValid(toCredential);
  t.is(back?.identity, cred.identity);
  t.is(back?.keyPem, cred.keyPem);
  const files = await import('node:fs/promises').then((fs) => fs.readdir(dir));
  t.is(files.length, 1);
  t.is((await stat(join(dir, files[0]!))).mode & 0o777, 0o600);
  t.deepEqual(await opened.value.loadValid(toCredential, cred.notAfter.getTime()), [], 'expired: not loaded');
  t.deepEqual(await import('node:fs/promises').then((fs) => fs.readdir(dir)), [], 'and deleted');
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
