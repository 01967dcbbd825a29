import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { startZtunnelProcess, stopChild, waitReady, ZMESH_BIN } from './ztunnel-process.js';

/*
 * An idle proxy should cost nothing. Two 10 ms timers used to wake ztunnel 200 times a
 * second with no traffic (ByteFairness's tick and prom-client's event-loop histogram), and
 * the resulting 1.3% event-loop utilisation kept IdleReclaim from ever seeing it quiet, so
 * start-up garbage stayed resident (RSS 96 MB with 100 pods, 84 MB once reclaimed). The
 * waypoint runs IdleReclaim too. Both run from the proxies' bundle (scripts/bundle.mjs),
 * ~7 MB less resident than the same code from dist/. Each test has its own loopback address.
 */

/** Voluntary and involuntary context switches of one thread of a process: its wake-ups. */
async function wakeups(pid: number, tid = pid): Promise<number> {
  const status = await readFile(`/proc/${pid}/task/${tid}/status`, 'utf8').catch(() => '');
  let n = 0;
  for (const m of status.matchAll(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)$/gm)) n += Number(m[1]);
  return n;
}

/** Each thread's wake-ups, by name (ztunnel's worker threads are named after their entry). */
async function threadWakeups(pid: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const name = (await readFile(`/proc/${pid}/task/${tid}/comm`, 'utf8').catch(() => '?')).trim();
    out.set(`${name}/${tid}`, await wakeups(pid, Number(tid)));
  }
  return out;
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function caDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-idle-'));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
  await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
  return dir;
}

/**
 * `zmesh_memory_reclaims_total` once it is at least 1, or after `tries` reads. Each read
 * waits 10 s: a scrape is work for the proxy, and scrapes every half second, on a loaded
 * CI machine, held off the quiet its reclaim waits for.
 */
async function reclaimsWithin(address: string, tries: number): Promise<number> {
  for (let i = 1; ; i++) {
    await delay(10_000);
    const metrics = await (await fetch(`http://${address}:15020/metrics`)).text();
    const reclaims = Number(/^zmesh_memory_reclaims_total (\d+)/m.exec(metrics)?.[1] ?? 0);
    if (reclaims >= 1 || i >= tries) return reclaims;
  }
}

/**
 * Once `child` is ready: it runs from the bundle, it wakes rarely at rest, and it gave
 * start-up memory back once.
 */
async function checkIdle(t: ExecutionContext, child: ResultPromise, address: string): Promise<void> {
  // bin/zmesh execs node, so the pid is the proxy's; a stale bundle would fall back to dist/.
  const argv = (await readFile(`/proc/${child.pid}/cmdline`, 'utf8')).split('\0');
  t.true(
    argv.some((a) => a.endsWith('/dist/bundle/main.js')),
    argv.join(' '),
  );
  // IdleReclaim samples every 2 s: start-up is work, and ~8 s into the quiet after it the
  // proxy reclaims (QUIET_BEFORE_RECLAIM_MS).
  const reclaims = await reclaimsWithin(address, 3);
  t.true(reclaims >= 1, `zmesh_memory_reclaims_total ${reclaims} within 30 s of ready`);
  const before = await wakeups(child.pid!);
  const threadsBefore = await threadWakeups(child.pid!);
  const seconds = 3;
  await delay(seconds * 1000);
  const perSecond = ((await wakeups(child.pid!)) - before) / seconds;
  const threadsAfter = await threadWakeups(child.pid!);
  const rates = [...threadsAfter].map(([k, v]) => [k, (v - (threadsBefore.get(k) ?? v)) / seconds] as const);
  const busy = rates.map(([k, r]) => `${k}:${r.toFixed(0)}`);
  const total = rates.reduce((sum, [, r]) => sum + r, 0);
  t.log(`main thread wake-ups while idle: ${perSecond.toFixed(0)}/s; every thread: ${busy.join(' ')}`);
  // Left: the logger's 1 s flush, the 100 ms event-loop histogram, IdleReclaim's 2 s
  // sample. ztunnel's was over 100 a second.
  t.true(perSecond < 40, `${perSecond}/s`);
  // ztunnel's worker threads (`--workers auto`) idle too: at 2 workers about 20 in all.
  t.true(total < 60, `every thread together: ${total}/s`);
}

test('an idle ztunnel runs from the bundle, rarely wakes up, and gives start-up memory back once', async (t) => {
  const address = '127.0.77.1';
  const dir = await caDir();
  const pods = Array.from({ length: 20 }, (_, i) => ({
    name: `pod-${i}`,
    namespace: 'idle',
    serviceAccount: `sa-${i}`,
    addresses: [`127.0.78.${i + 1}`],
    node: 'node-a',
  }));
  const forwards = pods.map((p) => ({
    workload: `Kubernetes//Pod/idle/${p.name}`,
    listen: `${p.addresses[0]}:16299`,
    destination: '127.0.78.200:5201',
  }));
  await writeFile(join(dir, 'mesh.yaml'), stringify({ workloads: pods, forwards }));
  const child = startZtunnelProcess({
    config: join(dir, 'mesh.yaml'),
    caDir: dir,
    node: 'node-a',
    address,
    log: 'error',
  });
  try {
    await waitReady(address);
    await checkIdle(t, child, address);
  } finally {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  }
});

test('an idle waypoint runs from the bundle, rarely wakes up, and gives start-up memory back once', async (t) => {
  const address = '127.0.77.2';
  const dir = await caDir();
  await writeFile(
    join(dir, 'waypoint.yaml'),
    stringify({ waypoint: { name: 'waypoint', namespace: 'idle' } }),
  );
  const child = execa(
    ZMESH_BIN,
    ['waypoint', '--config', join(dir, 'waypoint.yaml'), '--ca-dir', dir, '--address', address],
    { reject: false, stdout: 'ignore', stderr: 'inherit', env: { ZMESH_LOG: 'warn' } },
  );
  try {
    await waitReady(address, 15_000, 15020);
    await checkIdle(t, child, address);
  } finally {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  }
});
