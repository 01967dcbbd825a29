import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { execa } from 'execa';
import { ZMESH_BIN } from '../local/ztunnel-process.js';
import { type BenchReport, ratiosOf } from './bench-results.js';
import { CLUSTER_DIRECT_PATH, CLUSTER_ZMESH_PATH } from './cluster-paths.js';

const NEEDS = ['iperf3', 'redis-server', 'redis-benchmark', 'wrk', 'taskset', 'ss'];
const missing = (
  await Promise.all(
    NEEDS.map(async (b) => ((await execa('which', [b], { reject: false })).exitCode ? b : '')),
  )
).filter(Boolean);
const noCapture = await BpfCapture.unavailableReason();
const why = noCapture
  ? ` (skipped: needs root and BPF: ${noCapture})`
  : missing.length > 0
    ? ` (skipped: ${missing.join(', ')} not installed; scripts/bootstrap.sh)`
    : '';
const clusterTest = why ? test.skip : test;

clusterTest(
  `zmesh bench --quick --paths cluster: pod to pod across nodes, direct and captured, every workload${why}`,
  async (t) => {
    t.timeout(150_000);
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-bench-cluster-test-'));
    try {
      const json = join(dir, 'bench.json');
      const run = await execa(ZMESH_BIN, ['bench', '--quick', '--paths', 'cluster', '--json', json], {
        reject: false,
        all: true,
      });
      t.log(
        run.all
          ?.split('\n')
          .filter((l) => !l.startsWith('{'))
          .join('\n'),
      );
      t.is(run.exitCode, 0, 'no step failed');
      const report = JSON.parse(await readFile(json, 'utf8')) as BenchReport;
      t.deepEqual(
        report.paths.map((p) => [p.name, p.direct]),
        [
          [CLUSTER_DIRECT_PATH, CLUSTER_DIRECT_PATH],
          [CLUSTER_ZMESH_PATH, CLUSTER_DIRECT_PATH],
        ],
      );
      const workloads = new Set(
        report.results.filter((r) => r.path === CLUSTER_DIRECT_PATH).map((r) => r.workload),
      );
      t.true(workloads.size >= 6, `workloads measured in the pods: ${[...workloads].join(', ')}`);
      const captured = report.results.filter((r) => r.path === CLUSTER_ZMESH_PATH);
      for (const w of workloads)
        t.true(
          captured.some((r) => r.workload === w),
          `captured path measured ${w}`,
        );
      // The captured pair is held against the cluster's own pod-to-pod path, not loopback's.
      const iperf = captured.find((r) => r.workload === 'iperf3 1 stream' && r.metric === 'throughput')!;
      t.true(ratiosOf(report, iperf).direct! > 0);
      t.true(captured.some((r) => r.metric === 'added p50'));
      t.true(
        captured.some((r) => r.metric === 'CPU per 1,000 rps'),
        'both ztunnels CPU read from /proc',
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
