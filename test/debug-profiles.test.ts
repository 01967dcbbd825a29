import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority, isLoopback } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { execa } from 'execa';

/**
 * Heap snapshots and CPU profiles from running proxies (the real processes), on ztunnel's
 * admin listener and the waypoint's metrics listener. 127.87.0.0/16 is these tests'.
 */
const ZMESH = new URL('../../bin/zmesh', import.meta.url).pathname;

async function caDir(t: ExecutionContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-debug-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
  await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
  return dir;
}

async function until(url: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await fetch(url);
      return;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function checkProfiles(t: ExecutionContext, base: string): Promise<void> {
  const [cpu, busy] = await Promise.all([
    fetch(`${base}/debug/cpu?seconds=1`),
    new Promise<Response>((r) => setTimeout(() => r(fetch(`${base}/debug/heap`)), 200)),
  ]);
  t.is(busy.status, 429, 'one profile at a time');
  t.is(cpu.status, 200);
  const profile = (await cpu.json()) as { nodes: unknown[]; startTime: number; endTime: number };
  t.true(profile.nodes.length > 0);
  t.true(profile.endTime - profile.startTime >= 900_000, 'about one second of samples (µs)');
  const heap = await fetch(`${base}/debug/heap`);
  t.is(heap.status, 200);
  const snapshot = JSON.parse(await heap.text()) as { snapshot: { meta: unknown; node_count: number } };
  t.truthy(snapshot.snapshot.meta);
  t.true(snapshot.snapshot.node_count > 1000);
  for (const bad of ['0', '61', 'ten', '-1'])
    t.is((await fetch(`${base}/debug/cpu?seconds=${bad}`)).status, 400, `seconds=${bad}`);
}

test('a running ztunnel serves a CPU profile and a heap snapshot that parse as JSON', async (t) => {
  t.timeout(60_000);
  const dir = await caDir(t);
  await writeFile(join(dir, 'mesh.yaml'), 'workloads: []\n');
  const z = execa(
    ZMESH,
    [
      'ztunnel',
      '--config',
      join(dir, 'mesh.yaml'),
      '--node',
      'n',
      '--address',
      '127.87.0.1',
      '--ca-dir',
      dir,
    ],
    { reject: false, env: { ZMESH_LOG: 'error' } },
  );
  t.teardown(() => {
    z.kill('SIGKILL');
  });
  await until('http://127.87.0.1:15000/config_dump');
  await checkProfiles(t, 'http://127.87.0.1:15000');
});

test('a running waypoint serves them on its metrics listener', async (t) => {
  t.timeout(60_000);
  const dir = await caDir(t);
  await writeFile(join(dir, 'wp.yaml'), 'waypoint: { name: wp, namespace: shop }\n');
  const w = execa(
    ZMESH,
    [
      'waypoint',
      '--config',
      join(dir, 'wp.yaml'),
      '--ca-dir',
      dir,
      '--address',
      '127.87.0.2',
      '--warm-up-requests',
      '0',
    ],
    { reject: false, env: { ZMESH_LOG: 'error' } },
  );
  t.teardown(() => {
    w.kill('SIGKILL');
  });
  await until('http://127.87.0.2:15020/healthz/ready');
  await checkProfiles(t, 'http://127.87.0.2:15020');
});

test('profiles are for loopback callers only', (t) => {
  for (const a of ['127.0.0.1', '127.87.0.2', '::1', '::ffff:127.0.0.1']) t.true(isLoopback(a), a);
  for (const a of ['10.244.1.2', '::ffff:10.0.0.1', 'fe80::1', '', undefined, '128.0.0.1'])
    t.false(isLoopback(a), String(a));
});
