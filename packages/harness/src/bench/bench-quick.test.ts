import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { execa } from 'execa';
import { ZMESH_BIN } from '../local/ztunnel-process.js';
import type { BenchReport } from './bench-results.js';

/** Binaries the quick bench needs for every path to produce numbers. */
const PEERS = ['iperf3', 'socat', 'stunnel4', 'haproxy', 'redis-server', 'redis-benchmark', 'wrk', 'taskset'];

const missing = (
  await Promise.all(
    PEERS.map(async (b) => ((await execa('which', [b], { reject: false })).exitCode ? b : '')),
  )
).filter(Boolean);
const benchTest = missing.length === 0 ? test : test.skip;
const why =
  missing.length === 0 ? '' : ` (skipped: ${missing.join(', ')} not installed; scripts/bootstrap.sh)`;

benchTest(`zmesh bench --quick: every path produces numbers for every workload${why}`, async (t) => {
  t.timeout(120_000);
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-bench-test-'));
  try {
    const json = join(dir, 'bench.json');
    const started = Date.now();
    const run = await execa(ZMESH_BIN, ['bench', '--quick', '--json', json], { reject: false, all: true });
    t.log(run.all);
    t.log(`quick bench took ${((Date.now() - started) / 1000).toFixed(1)} s`);
    t.is(run.exitCode, 0, 'no step failed');
    const report = JSON.parse(await readFile(json, 'utf8')) as BenchReport;
    const names = report.paths.map((p) => p.name);
    t.deepEqual(names, ['direct', 'socat relay pair', 'stunnel4 pair', 'haproxy pair', 'zmesh ztunnel pair']);
    const workloads = new Set(report.results.filter((r) => r.path === 'direct').map((r) => r.workload));
    for (const path of names) {
      const mine = report.results.filter((r) => r.path === path);
      for (const w of workloads)
        t.true(
          mine.some((r) => r.workload === w),
          `${path} measured ${w}`,
        );
      for (const r of mine) t.true(Number.isFinite(r.value), `${path} ${r.workload} ${r.metric} is a number`);
      if (path !== 'direct')
        t.true(
          mine.some((r) => r.workload === 'after bulk traffic' && r.value > 0),
          `${path}: memory at rest after the iperf3 runs`,
        );
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
