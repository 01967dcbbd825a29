import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { CertificateAuthority, TrustBundle } from '../index.js';
import { RootsFileWatcher } from './roots-file.js';

async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('roots added to and removed from the watched file are trusted and dropped live', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-roots-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const [r1, r2] = await Promise.all(
    [1, 2].map(() => CertificateAuthority.create({ trustDomain: 'cluster.local' })),
  );
  const path = join(dir, 'roots.pem');
  const put = async (text: string) => {
    await writeFile(`${path}.tmp`, text);
    await rename(`${path}.tmp`, path);
  };
  await put(r1!.rootPem);
  const bundle = new TrustBundle('cluster.local');
  const watcher = new RootsFileWatcher(path, bundle);
  t.teardown(() => watcher.stop());
  t.deepEqual(await watcher.start(), { ok: true, value: 1 });
  t.is(bundle.roots().length, 1);

  await put(`${r1!.rootPem}\n${r2!.rootPem}`);
  await until(() => bundle.roots().length === 2);
  t.pass('both roots trusted during rotation');

  await put('-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n');
  await new Promise((r) => setTimeout(r, 300));
  t.is(bundle.roots().length, 2, 'a broken file changes nothing');

  await put(r2!.rootPem);
  await until(() => bundle.roots().length === 1);
  t.is(bundle.roots()[0], new TrustBundle('cluster.local', [r2!.rootPem]).roots()[0]);
});
