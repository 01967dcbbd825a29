import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { execa } from 'execa';
import { ZMESH_BIN } from '../local/ztunnel-process.js';
import { type BenchReport, ratiosOf } from './bench-results.js';
import { CLUSTER_DIRECT_PATH, CLUSTER_WAYPOINT_PATH, CLUSTER_ZMESH_PATH } from './cluster-paths.js';

const NEEDS = [
  'iperf3',
  'redis-server',
  'redis-benchmark',
  'wrk',
  'taskset',
  'ss',
  'socat',
  'stunnel4',
  'haproxy',
];
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
  `zmesh bench --quick --paths cluster: pod to pod across nodes, direct, C peers, captured and via a waypoint, every workload${why}`,
  async (t) => {
    t.timeout(240_000);
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
          CLUSTER_DIRECT_PATH,
          'cluster: socat relay pair',
          'cluster: stunnel4 pair',
          'cluster: haproxy pair',
          CLUSTER_ZMESH_PATH,
          CLUSTER_WAYPOINT_PATH,
        ].map((name) => [name, CLUSTER_DIRECT_PATH]),
      );
      const workloads = new Set(
        report.results.filter((r) => r.path === CLUSTER_DIRECT_PATH).map((r) => r.workload),
      );
      t.true(workloads.size >= 6, `workloads measured in the pods: ${[...workloads].join(', ')}`);
      for (const path of report.paths.slice(1)) {
        const mine = report.results.filter((r) => r.path === path.name);
        for (const w of workloads)
          t.true(
            mine.some((r) => r.workload === w),
            `${path.name} measured ${w}`,
          );
      }
      const captured = report.results.filter((r) => r.path === CLUSTER_ZMESH_PATH);
      // Held against the cluster's own pod-to-pod path and C peers, not loopback's.
      const iperf = captured.find((r) => r.workload === 'iperf3 1 stream' && r.metric === 'throughput')!;
      const q = ratiosOf(report, iperf);
      t.true(q.direct! > 0);
      t.true(q.bestCPath?.startsWith('cluster: '), `best C peer: ${q.bestCPath}`);
      t.true(captured.some((r) => r.metric === 'added p50'));
      t.true(
        captured.some((r) => r.metric === 'CPU per 1,000 rps'),
        'both ztunnels CPU read from /proc',
      );
      // node-a's ztunnel with 100 enrolled pods at rest, then idle connections held by the client pod.
      t.true(
        captured.some((r) => r.metric === 'RSS (largest process)' && r.value > 0),
        'RSS with 100 enrolled pods',
      );
      t.true(captured.some((r) => r.metric === 'memory per connection'));
      // The waypoint's own process did the L7 work of the HTTP load.
      const waypointCpu = report.results.find(
        (r) => r.path === CLUSTER_WAYPOINT_PATH && r.metric === 'waypoint CPU per 1,000 rps',
      );
      t.true((waypointCpu?.value ?? 0) > 0, `waypoint CPU per 1,000 rps: ${waypointCpu?.value}`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
