import { writeFile } from 'node:fs/promises';
import type { ResultPromise } from 'execa';
import { LocalMesh } from '../mesh/local-mesh.js';
import { barChartPng } from '../report/chart.js';
import { cpuSeconds } from './proc-stat.js';

/** One reading: the captured ztunnel pair at `workers` threads each, with a CPU placement. */
export interface WorkerBenchRow {
  workers: number;
  placement: string;
  /** Aggregate MB/s received by the four iperf3 servers (8 streams). */
  mbs: number;
  /** CPU seconds of both ztunnel processes (every thread) over the run. */
  ztunnelCpuSeconds: number;
  /** ztunnel CPU seconds per GB moved (both ends of the tunnel together). */
  cpuSecondsPerGb: number;
  /** Throughput against the 1-worker row of the same placement, same run. */
  vsOneWorker: number;
}

const PAIRS = 4;
const STREAMS_PER_PAIR = 2;
const IPERF_PORT = 5201;

/**
 * Placements on a 2-core machine. `split`: both ztunnels on CPU 0, the load (iperf3 clients
 * and servers) on CPU 1: a second worker has no core of its own, so this shows the cost of
 * threads, not their gain. `shared`: ztunnels and load on both CPUs: what two workers can get
 * when the kernel may run them on two cores, with the load competing for the same two.
 */
const PLACEMENTS = [
  { name: 'split: ztunnels cpu 0, load cpu 1', ztunnel: '0', load: '1' },
  { name: 'shared: ztunnels and load on cpus 0-1', ztunnel: '0-1', load: '0-1' },
] as const;

/**
 * Issue 39's scaling row: the captured ztunnel pair with 1 and 2 worker threads, 8 iperf3
 * streams from 4 client pods on node-a to 4 server pods on node-b (pods spread so that both
 * nodes' workers have pods), aggregate throughput and ztunnel CPU per GB.
 */
export async function runWorkerBench(
  opts: { quick?: boolean; json?: string; png?: string; workers?: number[] } = {},
): Promise<WorkerBenchRow[]> {
  const seconds = opts.quick ? 4 : 10;
  const rows: WorkerBenchRow[] = [];
  for (const placement of PLACEMENTS) {
    for (const workers of opts.workers ?? [1, 2]) {
      const r = await measure(workers, placement, seconds);
      const base = rows.find((x) => x.placement === placement.name && x.workers === 1);
      rows.push({ ...r, vsOneWorker: base ? r.mbs / base.mbs : 1 });
    }
  }
  if (opts.json) await writeFile(opts.json, `${JSON.stringify({ seconds, cores: 2, rows }, null, 2)}\n`);
  if (opts.png)
    await writeFile(
      opts.png,
      await barChartPng(
        rows.flatMap((r) => [
          { group: `${r.placement}: MB/s`, series: `${r.workers} worker(s)`, value: r.mbs },
          {
            group: `${r.placement}: ztunnel CPU s/GB`,
            series: `${r.workers} worker(s)`,
            value: r.cpuSecondsPerGb,
          },
        ]),
        { title: 'ztunnel pair, 8 iperf3 streams from 4 pods, by worker threads' },
      ),
    );
  return rows;
}

async function measure(
  workers: number,
  placement: (typeof PLACEMENTS)[number],
  seconds: number,
): Promise<Omit<WorkerBenchRow, 'vsOneWorker'>> {
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
      servers.push(
        mesh.cluster.runInPod(
          server,
          ['taskset', '-c', placement.load, 'iperf3', '-s', '-B', server.ipv4, '-p', String(IPERF_PORT)],
          { reject: false, stdio: 'ignore' },
        ),
      );
    }
    await new Promise((r) => setTimeout(r, 500));
    const pids = ['node-a', 'node-b']
      .map((n) => mesh.ztunnelPid(n))
      .filter((p): p is number => p !== undefined);
    const cpuBefore = await cpuSeconds(pids);
    const runs = await Promise.all(
      Array.from({ length: PAIRS }, (_, i) =>
        mesh.cluster.exec(
          mesh.pod(`client-${i}`),
          [
            'taskset',
            '-c',
            placement.load,
            'iperf3',
            '-c',
            mesh.pod(`server-${i}`).ipv4,
            '-p',
            String(IPERF_PORT),
            '-t',
            String(seconds),
            '-P',
            String(STREAMS_PER_PAIR),
            '-J',
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
      workers,
      placement: placement.name,
      mbs: bitsPerSecond / 8 / 1e6,
      ztunnelCpuSeconds: cpu,
      cpuSecondsPerGb: cpu / (bytes / 1e9),
    };
  } finally {
    for (const s of servers) s.kill('SIGKILL');
    await mesh.down();
  }
}

export function workerTable(rows: WorkerBenchRow[]): string {
  const lines = [['placement', 'workers', 'MB/s', 'vs 1 worker', 'ztunnel CPU s', 'CPU s/GB']];
  for (const r of rows)
    lines.push([
      r.placement,
      String(r.workers),
      r.mbs.toFixed(0),
      `${r.vsOneWorker.toFixed(2)}×`,
      r.ztunnelCpuSeconds.toFixed(1),
      r.cpuSecondsPerGb.toFixed(2),
    ]);
  const w = lines[0]!.map((_, i) => Math.max(...lines.map((l) => l[i]!.length)));
  return lines.map((l) => l.map((c, i) => c.padEnd(w[i]!)).join('  ')).join('\n');
}
