import { chmod, readFile, writeFile } from 'node:fs/promises';
import { cpus, release } from 'node:os';
import { dirname, join } from 'node:path';
import { CertificateAuthority, setLogLevel } from '@zmesh/shared';
import { execa } from 'execa';
import { tempDir } from '../local/exit-cleanup.js';
import { benchChartPng } from '../report/bench-chart.js';
import { rewritePerfSection } from '../report/perf-markdown.js';
import { BenchProgress } from './bench-progress.js';
import { type BenchReport, type BenchResult, ordered, type Runtime, textTable } from './bench-results.js';
import { BEFORE, checkTargets, targetsText } from './bench-targets.js';
import {
  CLUSTER_ZMESH_PATH,
  type ClusterPeer,
  clusterPath,
  clusterPeerPath,
  clusterWaypointPath,
} from './cluster-paths.js';
import { addedLatency, FULL, pathSteps, QUICK, type Step, type StepContext } from './path-workloads.js';
import {
  type BenchAddresses,
  directPath,
  type PathSpec,
  PROXY_CPU,
  socatPath,
  ztunnelPath,
} from './peer-paths.js';
import { resolveRuntimes, runtimeEnv, runtimePathName, runtimeTable } from './runtimes.js';
import { median } from './stats.js';
import { onPath, type RunningTargets, startTargets, type Target } from './targets.js';
import { haproxyHopPath, haproxyPath, nodeHopPath, nodeTlsPath, stunnelPath } from './tls-peers.js';
import { WAYPOINT_PATH, waypointPath } from './waypoint-path.js';

export interface BenchOptions {
  quick?: boolean;
  json?: string;
  png?: string;
  /** Rewrites the performance section of this markdown file (between perf markers). */
  markdown?: string;
  /** Another build's bin/zmesh, measured as "zmesh ztunnel pair (before)" in the same run. */
  baseline?: string;
  /** Comma-separated substrings: run only the paths whose names contain one. */
  paths?: string;
  /** Comma-separated substrings: run only the steps whose labels contain one (profiling). */
  workloads?: string;
  /**
   * Comma-separated Node runtimes (runtimes.ts): only the ztunnel pair is measured, once on
   * each, and each runtime's rows are divided by the first's.
   */
  runtimes?: string;
}

/** The bench's own loopback block (127.40/16 proxies and pods, 127.41/16 the extra pods). */
const ADDR: BenchAddresses = {
  nodeA: '127.40.0.2',
  nodeB: '127.40.0.3',
  client: '127.40.1.1',
  server: '127.40.2.1',
  fillerPrefix: '127.41.1',
};
const LOAD_CPU = '1';
const ZMESH_PATH = 'zmesh ztunnel pair';
const PINNING = `proxies on CPU ${PROXY_CPU}; load generators, servers and this process on CPU ${LOAD_CPU} (taskset)`;

/**
 * `zmesh bench`: every path measured in the same run on the same machine, reported as
 * ratios to direct and to the best C mTLS peer (absolute numbers on a shared 2-core
 * machine are noise).
 */
export async function runBench(opts: BenchOptions): Promise<number> {
  if (!(await onPath('iperf3'))) {
    console.error('bench: iperf3 not installed (scripts/bootstrap.sh installs it); nothing to measure');
    return 1;
  }
  // This process's own info lines (each cluster path's "cluster up", the capture pins it
  // removes on the way down) would break into the progress display; ZMESH_LOG overrides.
  if (process.env.ZMESH_LOG === undefined) setLogLevel('*', 'warn');
  // The servers and clients that run inside this process belong with the load generators.
  await execa('taskset', ['-a', '-p', '-c', LOAD_CPU, String(process.pid)], { reject: false });
  // ZMESH_BENCH_KEEP=1 keeps configs and proxy logs for a post-mortem.
  const temp = tempDir('zmesh-bench-');
  if (process.env.ZMESH_BENCH_KEEP) temp.keep();
  const dir = temp.path;
  // Load generators in the cluster's pods run as the pod's uid and read wrk's script here;
  // the CA key in it stays 0600.
  await chmod(dir, 0o711);
  let running: RunningTargets;
  try {
    running = await startTargets(ADDR.server, LOAD_CPU, dir);
  } catch (e) {
    temp.remove();
    console.error(`bench: ${(e as Error).message}`);
    return 1;
  }
  let runtimes: Runtime[] | undefined;
  try {
    runtimes = opts.runtimes === undefined ? undefined : await resolveRuntimes(opts.runtimes);
    if (runtimes && opts.markdown) throw new Error('--runtimes: --markdown takes a full run');
  } catch (e) {
    await running.close();
    temp.remove();
    console.error(`bench: ${(e as Error).message}`);
    return 1;
  }
  const results: BenchResult[] = [];
  const measured: BenchReport['paths'] = [];
  const failures: string[] = [];
  try {
    const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
    await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
    await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
    const ctx: StepContext = {
      budget: opts.quick ? QUICK : FULL,
      loadCpu: LOAD_CPU,
      dir,
      targets: new Set(running.targets.map((t) => t.name)),
    };
    const paths = runtimes
      ? runtimes.map((r) =>
          ztunnelPath(dir, ADDR, { name: runtimePathName(ZMESH_PATH, r), env: runtimeEnv(r) }),
        )
      : await availablePaths(opts, dir, ca);
    console.log(`pinning: ${PINNING}; ${ctx.budget.rounds} round(s), medians reported`);
    const rounds = Array.from({ length: ctx.budget.rounds }, (_, r) => r);
    const stepCount = rounds.reduce(
      (n, r) => n + paths.reduce((m, p) => m + stepsOf(p, ctx, opts, r).length + 1, 0),
      0,
    );
    const progress = new BenchProgress(stepCount);
    // Rounds go over every path in turn, so that a busy spell on a shared machine lands on
    // all paths rather than on one; each number is the median of its rounds.
    for (const round of rounds) {
      for (const path of paths) {
        const rows = await runPath(
          path,
          stepsOf(path, ctx, opts, round),
          running.targets,
          progress,
          failures,
        );
        if (rows && !measured.some((m) => m.name === path.name))
          measured.push({
            name: path.name,
            kind: path.kind,
            ...(path.direct ? { direct: path.direct } : {}),
            ...(path.l7Hop ? { l7Hop: true } : {}),
          });
        results.push(...(rows ?? []));
      }
    }
  } finally {
    await running.close();
    if (process.env.ZMESH_BENCH_KEEP) console.log(`kept ${dir}`);
    else temp.remove();
  }
  const medians = medianOfRounds(results);
  medians.push(...addedLatency(medians, (p) => measured.find((m) => m.name === p)?.direct ?? 'direct'));
  const report: BenchReport = { results: [], paths: measured, run: await runInfo(opts, runtimes) };
  report.results = ordered({ ...report, results: medians });
  await emit(report, opts);
  if (runtimes)
    console.log(`\nthe ztunnel pair on each runtime:\n${runtimeTable(report, ZMESH_PATH, runtimes)}\n`);
  if (failures.length > 0) console.log(`failed steps (no numbers): ${failures.join('; ')}`);
  return failures.length > 0 ? 2 : 0;
}

const CLUSTER_PEERS: ClusterPeer[] = ['socat relay pair', 'stunnel4 pair', 'haproxy pair'];

async function availablePaths(
  opts: BenchOptions,
  dir: string,
  ca: CertificateAuthority,
): Promise<PathSpec[]> {
  const all = [
    directPath(),
    socatPath(ADDR),
    stunnelPath(dir, ca, ADDR),
    haproxyPath(dir, ca, ADDR),
    // Node's own floor: a reference for the full run; --quick (CI) stays under a minute without it.
    ...(opts.quick && !opts.paths ? [] : [nodeTlsPath(dir, ca, ADDR)]),
    ...(opts.baseline
      ? [ztunnelPath(dir, ADDR, { name: `${ZMESH_PATH}${BEFORE}`, bin: opts.baseline })]
      : []),
    ztunnelPath(dir, ADDR),
    // Paths that take seconds to start (three proxies and a control plane; a netns cluster)
    // are left out of --quick (CI) unless --paths names them.
    ...(opts.quick && !opts.paths
      ? []
      : [
          ...(opts.baseline
            ? [waypointPath(dir, ADDR, { name: `${WAYPOINT_PATH}${BEFORE}`, bin: opts.baseline })]
            : []),
          waypointPath(dir, ADDR),
          // What an L7 hop between a pair costs in C and in Node itself (the waypoint's peers).
          haproxyHopPath(dir, ca, ADDR),
          nodeHopPath(dir, ca, ADDR),
          // Pod to pod across the netns cluster's nodes (needs root): directly, through the
          // C peers' pairs in the nodes, through ztunnel by BPF capture, and through ztunnel
          // and the server namespace's waypoint.
          clusterPath(false, LOAD_CPU),
          ...CLUSTER_PEERS.map((peer) => clusterPeerPath(peer, LOAD_CPU, dir, ca)),
          clusterPath(true, LOAD_CPU),
          clusterWaypointPath(LOAD_CPU),
        ]),
  ];
  const wanted = opts.paths?.split(',').map((s) => s.trim());
  const out: PathSpec[] = [];
  for (const p of all) {
    // `=name` is the whole name: the waypoint path's name is part of the cluster waypoint path's.
    if (wanted && !wanted.some((w) => (w.startsWith('=') ? p.name === w.slice(1) : p.name.includes(w))))
      continue;
    const why = await p.unavailable();
    if (why) console.log(`skip ${p.name}: ${why}`);
    else out.push(p);
  }
  return out;
}

/** Opens one path, runs its steps and closes it; undefined if it would not start. */
async function runPath(
  path: PathSpec,
  steps: Step[],
  targets: Target[],
  progress: BenchProgress,
  failures: string[],
): Promise<BenchResult[] | undefined> {
  const start = () => path.open(targets);
  const open = await progress.step(`${path.name}: start`, start, () => '').catch(() => undefined);
  if (!open) {
    failures.push(`${path.name}: start`);
    return undefined;
  }
  const rows: BenchResult[] = [];
  try {
    for (const step of steps) {
      const label = `${path.name}: ${step.label}`;
      // One failed step loses its numbers, not the run's: the others are still comparable.
      const got = await progress
        .step(label, () => step.run(open), summary)
        .catch(() => {
          failures.push(label);
          return [];
        });
      rows.push(...got);
    }
  } finally {
    await open.close();
  }
  return rows;
}

/** Steps of `path` in round `round`: one-off steps (memory, on fresh proxies) only in the first. */
function stepsOf(path: PathSpec, ctx: StepContext, opts: BenchOptions, round: number): Step[] {
  const wanted = opts.workloads?.split(',').map((s) => s.trim());
  return pathSteps(path, ctx)
    .filter((s) => round === 0 || !s.once)
    .filter((s) => !wanted || wanted.some((w) => s.label.includes(w)));
}

/** One row per (path, workload, metric): the median of the rounds' values. */
function medianOfRounds(results: BenchResult[]): BenchResult[] {
  const groups = new Map<string, BenchResult[]>();
  for (const r of results) {
    const key = `${r.path}\u0000${r.workload}\u0000${r.metric}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  return [...groups.values()].map((rows) => {
    return { ...rows[0]!, value: median(rows.map((r) => r.value).sort((a, b) => a - b)) };
  });
}

function summary(rows: BenchResult[]): string {
  return rows.map((r) => `${r.metric} ${r.value.toFixed(r.value >= 100 ? 0 : 2)} ${r.unit}`).join(', ');
}

async function runInfo(opts: BenchOptions, runtimes?: Runtime[]): Promise<BenchReport['run']> {
  // bin/zmesh sits at the top of its checkout: the revision says what "before" was.
  const rev = opts.baseline
    ? await execa('git', ['-C', dirname(opts.baseline), 'log', '-1', '--format=%h %s'], { reject: false })
    : undefined;
  return {
    ...(opts.baseline ? { baseline: rev?.exitCode === 0 ? rev.stdout.trim() : opts.baseline } : {}),
    ...(runtimes ? { runtimes } : {}),
    date: new Date().toISOString(),
    quick: Boolean(opts.quick),
    cpus: cpus().length,
    node: process.version,
    kernel: release(),
    pinning: PINNING,
  };
}

async function emit(report: BenchReport, opts: BenchOptions): Promise<void> {
  console.log(`\n${textTable(report)}\n`);
  for (const path of [ZMESH_PATH, CLUSTER_ZMESH_PATH]) {
    if (report.paths.some((p) => p.name === path))
      console.log(`targets (${path}):\n${targetsText(checkTargets(report, path))}\n`);
  }
  if (opts.json) await writeFile(opts.json, `${JSON.stringify(report, null, 2)}\n`);
  if (opts.png) await writeFile(opts.png, await benchChartPng(report));
  if (opts.markdown) {
    const text = await readFile(opts.markdown, 'utf8');
    await writeFile(opts.markdown, rewritePerfSection(text, report, ZMESH_PATH));
  }
}
