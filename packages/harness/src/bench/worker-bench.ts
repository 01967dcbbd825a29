import { writeFile } from 'node:fs/promises';
import type { ResultPromise } from 'execa';
import { LocalMesh } from '../mesh/local-mesh.js';
import { barChartPng } from '../report/chart.js';
import { cpuSeconds } from './proc-stat.js';

type WorkerWorkload = 'iperf3, 8 streams' | 'redis GET, 50 conns';

/** One reading: the captured ztunnel pair at `workers` threads each, with a CPU placement. */
export interface WorkerBenchRow {
  workload: WorkerWorkload;
  workers: number;
  placement: string;
  /** Summed over the four client pods: MB/s received (iperf3) or requests/s (redis). */
  throughput: number;
  unit: 'MB/s' | 'req/s';
  /** CPU seconds of both ztunnel processes (every thread) over the workload. */
  ztunnelCpuSeconds: number;
  /** ztunnel CPU (both ends of the tunnel together) per GB moved or per 1,000 requests. */
  cpuPerUnit: number;
  cpuUnit: 'CPU s/GB' | 'CPU ms/1k req';
  /** Throughput against the 1-worker row of the same workload and placement, same run. */
  vsOneWorker: number;
}

const PAIRS = 4;
const STREAMS_PER_PAIR = 2;
const IPERF_PORT = 5201;
const REDIS_PORT = 6379;
/** The 50 connections, spread over the four client pods (13, 13, 12, 12). */
const REDIS_CONNECTIONS = 50;
/** GETs per client pod: a few seconds at the ~25k req/s the pair does on these VMs. */
const REDIS_REQUESTS = { quick: 25_000, full: 75_000 };

/**
 * Placements on a 2-core machine. `split`: both ztunnels on CPU 0, the load generators and
 * servers (iperf3, redis) on CPU 1, pinned apart as the issue asks: a second worker has no
 * core of its own, so this shows the cost of threads, not their gain. `shared`: ztunnels and
 * load on both CPUs: what more workers can get when the kernel may run them on two cores,
 * with the load competing for the same two.
 */
const PLACEMENTS = [
  { name: 'split: ztunnels cpu 0, load cpu 1', ztunnel: '0', load: '1' },
  { name: 'shared: ztunnels and load on cpus 0-1', ztunnel: '0-1', load: '0-1' },
] as const;
type Placement = (typeof PLACEMENTS)[number];

/**
 * Issue 39's scaling row: the captured ztunnel pair with 1, 2 and 4 worker threads, 4 client
 * pods on node-a and 4 server pods on node-b (so both nodes' workers have pods): 8 iperf3
 * streams, then redis GETs over 50 connections, each with ztunnel CPU per unit of work.
 */
export async function runWorkerBench(
  opts: { quick?: boolean; json?: string; png?: string; workers?: number[] } = {},
): Promise<WorkerBenchRow[]> {
  const seconds = opts.quick ? 4 : 10;
  const rows: WorkerBenchRow[] = [];
  for (const placement of PLACEMENTS) {
    for (const workers of opts.workers ?? [1, 2, 4]) {
      for (const r of await measure(workers, placement, seconds, opts.quick === true)) {
        const base = rows.find(
          (x) => x.placement === placement.name && x.workload === r.workload && x.workers === 1,
        );
        rows.push({ ...r, vsOneWorker: base ? r.throughput / base.throughput : 1 });
      }
    }
  }
  if (opts.json) await writeFile(opts.json, `${JSON.stringify({ seconds, cores: 2, rows }, null, 2)}\n`);
  if (opts.png)
    await writeFile(
      opts.png,
      await barChartPng(
        rows.flatMap((r) => [
          {
            group: `${r.workload}, ${r.placement.split(':')[0]}: ${r.unit}`,
            series: `${r.workers} worker(s)`,
            value: r.throughput,
          },
          {
            group: `${r.workload}, ${r.placement.split(':')[0]}: ztunnel ${r.cpuUnit}`,
            series: `${r.workers} worker(s)`,
            value: r.cpuPerUnit,
          },
        ]),
        { title: 'ztunnel pair, 4 client pods to 4 server pods, by worker threads' },
      ),
    );
  return rows;
}

async function measure(
  workers: number,
  placement: Placement,
  seconds: number,
  quick: boolean,
): Promise<Omit<WorkerBenchRow, 'vsOneWorker'>[]> {
  const pods = [];
  for (let i = 0; i < PAIRS; i++) {
    pods.push({ name: `client-${i}`, namespace: 'bench', serviceAccount: 'client', node: 'node-a' });
    pods.push({ name: `server-${i}`, namespace: 'bench', serviceAccount: 'server', node: 'node-b' });
  }
  const mesh = await LocalMesh.up(
    { nodes: ['node-a', 'node-b'], pods },
    {
      ztunnelCpus: placement.ztunnel,
      ztunnelLog: 'error',
      ztunnelArgs: ['--workers', String(workers), '--access-log', 'off'],
    },
  );
  const servers: ResultPromise[] = [];
  try {
    for (let i = 0; i < PAIRS; i++) {
      const server = mesh.pod(`server-${i}`);
      const pin = ['taskset', '-c', placement.load];
      servers.push(
        mesh.cluster.runInPod(server, [...pin, 'iperf3', '-s', '-B', server.ipv4, '-p', String(IPERF_PORT)], {
          reject: false,
          stdio: 'ignore',
        }),
        mesh.cluster.runInPod(
          server,
          [
            ...pin,
            'redis-server',
            ...['--port', String(REDIS_PORT), '--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
            ...['--dir', '/tmp', '--loglevel', 'warning'],
          ],
          { reject: false, stdio: 'ignore' },
        ),
      );
    }
    for (let i = 0; i < PAIRS; i++) await listening(mesh, `server-${i}`, [IPERF_PORT, REDIS_PORT]);
    const pids = ['node-a', 'node-b']
      .map((n) => mesh.ztunnelPid(n))
      .filter((p): p is number => p !== undefined);
    const iperf = await iperfRow(mesh, placement, seconds, pids);
    const redis = await redisRow(mesh, placement, quick ? REDIS_REQUESTS.quick : REDIS_REQUESTS.full, pids);
    return [iperf, redis].map((r) => ({ ...r, workers, placement: placement.name }));
  } finally {
    for (const s of servers) s.kill('SIGKILL');
    await mesh.down();
  }
}

type Measured = Omit<WorkerBenchRow, 'vsOneWorker' | 'workers' | 'placement'>;

/** 8 iperf3 streams, 2 from each client pod to its server pod, all at once. */
async function iperfRow(
  mesh: LocalMesh,
  placement: Placement,
  seconds: number,
  pids: number[],
): Promise<Measured> {
  const cpuBefore = await cpuSeconds(pids);
  const runs = await Promise.all(
    Array.from({ length: PAIRS }, (_, i) =>
      mesh.cluster.exec(
        mesh.pod(`client-${i}`),
        [
          ...['taskset', '-c', placement.load, 'iperf3', '-c', mesh.pod(`server-${i}`).ipv4],
          ...['-p', String(IPERF_PORT), '-t', String(seconds), '-P', String(STREAMS_PER_PAIR), '-J'],
        ],
        { timeoutMs: (seconds + 30) * 1000 },
      ),
    ),
  );
  const cpu = (await cpuSeconds(pids)) - cpuBefore;
  let bytes = 0;
  let bitsPerSecond = 0;
  for (const run of runs) {
    const report = JSON.parse(run.stdout) as {
      end?: { sum_received?: { bits_per_second?: number; bytes?: number } };
      error?: string;
    };
    const received = report.end?.sum_received;
    if (report.error || received?.bytes === undefined || received.bits_per_second === undefined)
      throw new Error(`iperf3: ${report.error ?? 'no result'}`);
    bytes += received.bytes;
    bitsPerSecond += received.bits_per_second;
  }
  return {
    workload: 'iperf3, 8 streams',
    throughput: bitsPerSecond / 8 / 1e6,
    unit: 'MB/s',
    ztunnelCpuSeconds: cpu,
    cpuPerUnit: cpu / (bytes / 1e9),
    cpuUnit: 'CPU s/GB',
  };
}

/**
 * redis-benchmark GETs from the four client pods at once, 50 connections in all, each pod to
 * its server pod. The rate is every request over the wall time until the last pod finished,
 * and ztunnel's CPU is counted over that same time.
 */
async function redisRow(
  mesh: LocalMesh,
  placement: Placement,
  requestsPerPod: number,
  pids: number[],
): Promise<Measured> {
  const started = performance.now();
  const cpuBefore = await cpuSeconds(pids);
  const runs = await Promise.all(
    Array.from({ length: PAIRS }, (_, i) => {
      const connections = Math.floor(REDIS_CONNECTIONS / PAIRS) + (i < REDIS_CONNECTIONS % PAIRS ? 1 : 0);
      return mesh.cluster.exec(
        mesh.pod(`client-${i}`),
        [
          ...['taskset', '-c', placement.load, 'redis-benchmark', '-h', mesh.pod(`server-${i}`).ipv4],
          ...['-p', String(REDIS_PORT), '-c', String(connections), '-n', String(requestsPerPod)],
          ...['-t', 'get', '--csv'],
        ],
        { timeoutMs: 120_000 },
      );
    }),
  );
  const cpu = (await cpuSeconds(pids)) - cpuBefore;
  const elapsed = (performance.now() - started) / 1000;
  for (const run of runs)
    if (!run.stdout.includes('"GET"'))
      throw new Error(`redis-benchmark: ${(run.stderr || run.stdout).slice(0, 300)}`);
  const requests = requestsPerPod * PAIRS;
  return {
    workload: 'redis GET, 50 conns',
    throughput: requests / elapsed,
    unit: 'req/s',
    ztunnelCpuSeconds: cpu,
    cpuPerUnit: (cpu * 1000) / (requests / 1000),
    cpuUnit: 'CPU ms/1k req',
  };
}

/** Polls the pod's listening sockets until every port is up (the servers start in parallel). */
async function listening(mesh: LocalMesh, pod: string, ports: number[], timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await mesh.cluster.exec(mesh.pod(pod), ['ss', '-Hltn']);
    const up = new Set([...r.stdout.matchAll(/:(\d+)\s/g)].map((m) => Number(m[1])));
    const missing = ports.filter((p) => !up.has(p));
    if (missing.length === 0) return;
    if (Date.now() > deadline) throw new Error(`${pod}: not listening on ${missing.join(', ')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function workerTable(rows: WorkerBenchRow[]): string {
  const lines = [
    ['workload', 'placement', 'workers', 'throughput', 'vs 1 worker', 'ztunnel CPU s', 'CPU per unit'],
  ];
  for (const r of rows)
    lines.push([
      r.workload,
      r.placement,
      String(r.workers),
      `${r.throughput.toFixed(0)} ${r.unit}`,
      `${r.vsOneWorker.toFixed(2)}×`,
      r.ztunnelCpuSeconds.toFixed(1),
      `${r.cpuPerUnit.toFixed(2)} ${r.cpuUnit}`,
    ]);
  const w = lines[0]!.map((_, i) => Math.max(...lines.map((l) => l[i]!.length)));
  return lines.map((l) => l.map((c, i) => c.padEnd(w[i]!)).join('  ')).join('\n');
}
