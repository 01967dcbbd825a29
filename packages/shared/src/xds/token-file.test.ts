import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { TokenFile } from './token-file.js';

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A Kubernetes projected volume: `token` -> `..data/token`, `..data` -> a timestamped dir. */
async function projected(dir: string, version: string, token: string, first: boolean): Promise<void> {
  const data = join(dir, `..${version}`);
  await mkdir(data);
  await writeFile(join(data, 'token'), token);
  await symlink(`..${version}`, join(dir, '..data_tmp'));
  await rename(join(dir, '..data_tmp'), join(dir, '..data'));
  if (first) await symlink('..data/token', join(dir, 'token'));
}

test('a projected token swapped by a ..data symlink rename is used without a refusal (issue 33)', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-token-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await projected(dir, '2026_12_05_a', 'token-a\n', true);
  const file = await TokenFile.read(join(dir, 'token'));
  // The closure the CA and xDS clients read at each connect and CSR.
  const current = () => file.token;
  file.watch({ pollMs: 3_600_000 }); // the poll cannot be what sees it
  t.teardown(() => file.stop());
  t.is(current(), 'token-a');
  await projected(dir, '2026_12_05_b', 'token-b\n', false);
  await until(() => current() === 'token-b');
  t.is(current(), 'token-b');
});

test('the fallback poll picks up a rewritten token file when no watch event comes', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-token-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.token');
  await writeFile(path, 'one');
  const file = await TokenFile.read(path);
  file.watch({ pollMs: 30, fsWatch: false });
  t.teardown(() => file.stop());
  await writeFile(path, 'two');
  await until(() => file.token === 'two');
  t.is(file.token, 'two');
  // An emptied (half-written) file keeps the token held.
  await writeFile(path, '');
  await new Promise((r) => setTimeout(r, 150));
  t.is(file.token, 'two');
  await writeFile(path, 'three');
  await until(() => file.token === 'three');
  file.stop();
  await writeFile(path, 'four');
  await new Promise((r) => setTimeout(r, 150));
  t.is(file.token, 'three', 'stopped: no more reads');
});

test('reread after a refusal still reports whether the token changed', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-token-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.token');
  await writeFile(path, 'one');
  const file = await TokenFile.read(path);
  t.false(await file.reread());
  await writeFile(path, 'two');
  t.true(await file.reread());
  t.is(file.token, 'two');
});
