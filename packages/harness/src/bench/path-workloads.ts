import type { BenchResult } from './bench-results.js';
import type { Endpoint } from './endpoint.js';
import { iperfThroughput } from './iperf.js';
import { measureMemory } from './memory.js';
import type { OpenPath, PathSpec } from './peer-paths.js';
import { cpuSeconds, largestResidentSet, type ResidentSet } from './proc-stat.js';
import { connectionRate, echoLatency, fixedRateHttp, redisBenchmark, runLoad } from './request-load.js';
import type { TargetName } from './targets.js';

/** How long each workload runs: `quick` keeps the whole bench under a minute (CI). */
export interface Budget {
  iperfSeconds: number;
  /**
   * iperf3 runs this long first, unmeasured (`-O`), on every path. A fresh Node proxy
   * compiles its data path during the first second: in one run the zmesh pair's first
   * second read 190-294 MB/s against 315-425 MB/s for the next two, while the C pairs'
   * first seconds read as their others. Steady state is what a long-running ztunnel gives;
   * CPU per GB still counts the whole run, warm-up included.
   */
  iperfOmitSeconds: number;
  /**
   * Requests per redis-benchmark test. The full run uses redis-benchmark's own default,
   * 100,000: at 10,000 a test lasted 0.2-0.5 s, so the 50 connections' setup and (for a
   * fresh Node proxy) JIT warm-up were a large part of what it measured.
   */
  redisRequests: number;
  roundTrips: number;
  /**
   * The echo pings of this first stretch are not counted, as iperf3's first second is not:
   * a fresh Node proxy compiles its data path meanwhile. Over one connection's first 3,000
   * pings the zmesh pair's p99 read 3.9-5.2 ms, over 20,000 pings 0.64 ms. In the bench's
   * echo step alone, run with and without this second in turn: the pair's added p99
   * 2.06 ms without, 1.19-1.22 ms with; its added p50 221 against 207-257 µs (noise), and
   * stunnel4's added p99 155-188 µs either way.
   */
  echoWarmupSeconds: number;
  connectSeconds: number;
  httpSeconds: number;
  /**
   * The same fixed-rate HTTP load, unmeasured, before `httpSeconds`: every path's processes
   * are warm, as in a mesh that has been serving. Without it the waypoint's L7 code (cold
   * until this step: echo, iperf3 and redis cross it at L4) queued requests for up to
   * 0.5 s while it was compiled, which was most of the path's p99 and some of its CPU.
   */
  httpWarmupSeconds: number;
  idleConnections: number;
  /**
   * Pause before reading memory, so allocations after the last handshake are counted and
   * the proxies' IdleReclaim has run (8 s into the quiet, which its 2 s samples see
   * starting up to 4 s after the work: 12 s).
   */
  settleMs: number;
  /**
   * Pause after bulk traffic before reading memory at rest: the same IdleReclaim, which also
   * waits out the gap its previous reclaim set (100 times its pause), and the collector's
   * freed pages are returned after it. The previous reclaim may be the one during the
   * memory step's idle connections, a few seconds before iperf3: on the waypoint path
   * (three processes on CPU 0) the next came ~40 s after that one, 30 s into the rest. At
   * 24 s the waypoint had not reclaimed yet (121 MB, where the build before, reclaiming at
   * other moments, read 77), so 45 s.
   */
  restMs: number;
  /** Times each path is measured (medians reported); memory is measured in the first only. */
  rounds: number;
}

export const FULL: Budget = {
  iperfSeconds: 3,
  iperfOmitSeconds: 1,
  redisRequests: 100_000,
  roundTrips: 10_000,
  echoWarmupSeconds: 1,
  connectSeconds: 2,
  httpSeconds: 5,
  httpWarmupSeconds: 2,
  idleConnections: 1000,
  settleMs: 14_000,
  restMs: 45_000,
  rounds: 3,
};

export const QUICK: Budget = {
  iperfSeconds: 1,
  iperfOmitSeconds: 0,
  redisRequests: 3_000,
  roundTrips: 500,
  echoWarmupSeconds: 0,
  connectSeconds: 0.5,
  httpSeconds: 1,
  httpWarmupSeconds: 1,
  idleConnections: 100,
  settleMs: 200,
  restMs: 200,
  rounds: 1,
};

/** The fixed HTTP request rate (docs/design.md §12, CPU per 1,000 requests per second). */
const HTTP_RATE = 1000;
const HTTP_WORKLOAD = 'HTTP 1 KiB @ 1,000 rps';

export interface StepContext {
  budget: Budget;
  loadCpu: string;
  dir: string;
  /** Targets that are running (redis only if redis-server is installed). */
  targets: Set<TargetName>;
}

export interface Step {
  label: string;
  /** Run in the first round only (memory wants fresh proxies). */
  once?: boolean;
  run(open: OpenPath): Promise<BenchResult[]>;
}

type Row = (workload: string, metric: string, value: number, unit: string) => BenchResult;

const at = (open: OpenPath, t: TargetName): Endpoint => open.endpoints.get(t)!;

/** The steps run on one open path, in order: memory first, while the proxies are fresh. */
export function pathSteps(path: PathSpec, ctx: StepContext): Step[] {
  const row: Row = (workload, metric, value, unit) => ({ path: path.name, workload, metric, value, unit });
  const memory = !(path.kind === 'direct' || (path.inPods && !path.podMemory));
  return [
    ...(memory ? [memoryStep(ctx, row)] : []),
    ...latencySteps(ctx, row),
    ...iperfSteps(ctx, row),
    ...(memory ? [restingStep(ctx, row)] : []),
    ...(ctx.targets.has('redis') ? redisSteps(ctx, row) : []),
    { label: HTTP_WORKLOAD, run: (open) => httpStep(open, ctx, row) },
  ];
}

function memoryStep(ctx: StepContext, row: Row): Step {
  const b = ctx.budget;
  return {
    label: `memory at rest and with ${b.idleConnections} idle connections`,
    once: true,
    run: async (open) => {
      const pod = open.launch ? { launch: open.launch, cpu: ctx.loadCpu } : undefined;
      const m = await measureMemory(open.pids, at(open, 'echo'), b.idleConnections, b.settleMs, pod);
      return [
        ...residentRows(row, 'idle', m.idleLargest),
        row('idle connections', 'memory per connection', m.perConnection / 1024, 'KiB'),
      ];
    },
  };
}

/** The largest proxy's RSS once it has rested after the iperf3 runs: what a burst leaves resident. */
function restingStep(ctx: StepContext, row: Row): Step {
  return {
    label: 'memory at rest after bulk traffic',
    once: true,
    run: async (open) => {
      await new Promise((r) => setTimeout(r, ctx.budget.restMs));
      return residentRows(row, 'after bulk traffic', await largestResidentSet(open.pids));
    },
  };
}

/**
 * The largest proxy's RSS, and the anonymous part of it: the rest is file pages (for a Node
 * proxy ~40 MB of the node executable, shared with every Node process on the machine).
 */
function residentRows(row: Row, workload: string, set: ResidentSet): BenchResult[] {
  return [
    row(workload, 'RSS (largest process)', set.rss / 2 ** 20, 'MB'),
    row(workload, 'anonymous RSS (largest process)', set.anon / 2 ** 20, 'MB'),
  ];
}

function latencySteps(ctx: StepContext, row: Row): Step[] {
  const b = ctx.budget;
  return [
    {
      label: `echo latency, ${b.roundTrips} round trips on one connection`,
      run: async (open) => {
        const l = await runLoad(open.launch, ctx.loadCpu, echoLatency, [
          at(open, 'echo'),
          b.roundTrips,
          b.echoWarmupSeconds * 1000,
        ]);
        return [row('echo, 1 conn', 'p50', l.p50, 'µs'), row('echo, 1 conn', 'p99', l.p99, 'µs')];
      },
    },
    {
      label: 'new connections per second',
      run: async (open) => {
        const rate = await runLoad(open.launch, ctx.loadCpu, connectionRate, [
          at(open, 'echo'),
          { seconds: b.connectSeconds, concurrency: 8 },
        ]);
        return [row('new connections', 'connections/s', rate, 'conn/s')];
      },
    },
  ];
}

function iperfSteps(ctx: StepContext, row: Row): Step[] {
  const b = ctx.budget;
  return [1, 4].map((streams) => {
    const workload = `iperf3 ${streams} stream${streams > 1 ? 's' : ''}`;
    return {
      label: workload,
      run: async (open) => {
        const cpuBefore = await cpuSeconds(open.pids);
        const e = at(open, 'iperf3');
        const r = await iperfThroughput({
          ...e,
          seconds: b.iperfSeconds,
          omitSeconds: b.iperfOmitSeconds,
          streams,
          cpu: ctx.loadCpu,
          launch: open.launch,
        });
        const rows = [row(workload, 'throughput', r.mbs, 'MB/s')];
        // CPU per byte: what the proxies spend, far less sensitive than MB/s to a busy machine.
        const cpu = (await cpuSeconds(open.pids)) - cpuBefore;
        if (open.pids.length > 0) rows.push(row(workload, 'CPU per GB', cpu / (r.megabytes / 1000), 'CPU·s'));
        return rows;
      },
    };
  });
}

function redisSteps(ctx: StepContext, row: Row): Step[] {
  return (['set', 'get'] as const).map((test) => {
    const workload = `redis ${test.toUpperCase()}, 50 conns`;
    return {
      label: workload,
      run: async (open) => {
        const opts = { test, requests: ctx.budget.redisRequests, cpu: ctx.loadCpu, launch: open.launch };
        const r = await redisBenchmark(at(open, 'redis'), opts);
        return [row(workload, 'requests/s', r.rps, 'req/s'), row(workload, 'p50', r.p50Ms, 'ms')];
      },
    };
  });
}

async function httpStep(open: OpenPath, ctx: StepContext, row: Row): Promise<BenchResult[]> {
  const load = (seconds: number) =>
    fixedRateHttp(open.endpoints.get('http')!, {
      rate: HTTP_RATE,
      seconds,
      connections: 20,
      cpu: ctx.loadCpu,
      dir: ctx.dir,
      launch: open.launch,
    });
  await load(ctx.budget.httpWarmupSeconds);
  const cpuBefore = await cpuSeconds(open.pids);
  const waypointBefore = open.waypointPid ? await cpuSeconds([open.waypointPid]) : 0;
  const started = process.hrtime.bigint();
  const r = await load(ctx.budget.httpSeconds);
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  const out = [
    row(HTTP_WORKLOAD, 'rate', r.rps, 'req/s'),
    row(HTTP_WORKLOAD, 'p50', r.p50Ms, 'ms'),
    row(HTTP_WORKLOAD, 'p99', r.p99Ms, 'ms'),
  ];
  if (open.pids.length > 0) {
    const vcpu = ((await cpuSeconds(open.pids)) - cpuBefore) / wall;
    out.push(row(HTTP_WORKLOAD, 'CPU per 1,000 rps', vcpu / (r.rps / 1000), 'vCPU'));
  }
  if (open.waypointPid) {
    const vcpu = ((await cpuSeconds([open.waypointPid])) - waypointBefore) / wall;
    out.push(row(HTTP_WORKLOAD, 'waypoint CPU per 1,000 rps', vcpu / (r.rps / 1000), 'vCPU'));
  }
  return out;
}

/**
 * Adds "added" latency (path − its direct path) once every path has run; `directOf` names
 * each path's direct path (`direct` on loopback, the cluster's own on the netns cluster).
 */
export function addedLatency(
  results: BenchResult[],
  directOf: (path: string) => string = () => 'direct',
): BenchResult[] {
  const pairs: [string, string][] = [
    ['echo, 1 conn', 'p50'],
    ['echo, 1 conn', 'p99'],
    [HTTP_WORKLOAD, 'p99'],
  ];
  const out: BenchResult[] = [];
  for (const [workload, metric] of pairs) {
    const same = results.filter((o) => o.workload === workload && o.metric === metric);
    for (const r of same) {
      const direct = same.find((o) => o.path === directOf(r.path));
      if (!direct || direct === r) continue;
      out.push({ ...r, metric: `added ${metric}`, value: r.value - direct.value });
    }
  }
  return out;
}
