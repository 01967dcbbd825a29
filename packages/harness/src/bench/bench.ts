import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority } from '@zmesh/shared';
import { execa } from 'execa';
import { stopChild } from '../local/ztunnel-process.js';
import { barChartPng } from '../report/chart.js';
import { iperfThroughput, startIperfServer } from './iperf.js';
import {
  type BenchAddresses,
  directPath,
  type PathSpec,
  PROXY_CPU,
  stunnelPath,
  waitListening,
  ztunnelPath,
} from './peer-paths.js';

export interface BenchResult {
  path: string;
  workload: string;
  metric: string;
  value: number;
  unit: string;
}

export interface BenchOptions {
  quick?: boolean;
  json?: string;
  png?: string;
}

const LOAD_CPU = '1';
const ADDR: BenchAddresses = {
  nodeA: '127.40.0.2',
  nodeB: '127.40.0.3',
  client: '127.40.1.1',
  server: '127.40.2.1',
};
const IPERF_PORT = 5201;
const C_PEERS = ['stunnel4 pair'];

/**
 * `zmesh bench`: every path measured in the same run on the same machine, reported as
 * ratios to direct and to the best C peer (absolute numbers on a shared 2-core machine
 * are noise). Proxies are pinned to CPU 0 and load generators to CPU 1 with taskset.
 */
export async function runBench(opts: BenchOptions): Promise<number> {
  const seconds = opts.quick ? 2 : 8;
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-bench-'));
  const iperf = startIperfServer(ADDR.server, IPERF_PORT, LOAD_CPU);
  const results: BenchResult[] = [];
  try {
    if ((await execa('which', ['iperf3'], { reject: false })).exitCode !== 0) {
      console.error('bench: iperf3 not installed (apt-get install iperf3); nothing to measure');
      return 1;
    }
    await waitListening(ADDR.server, IPERF_PORT);
    const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
    await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
    await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
    console.log(
      `pinning: proxies on CPU ${PROXY_CPU}, load generators (iperf3 client and server) on CPU ${LOAD_CPU} (taskset)`,
    );
    const paths: PathSpec[] = [directPath(), stunnelPath(dir, ca, ADDR), ztunnelPath(dir, ADDR)];
    for (const path of paths) {
      const why = await path.unavailable();
      if (why) {
        console.log(`skip ${path.name}: ${why}`);
        continue;
      }
      const open = await path.open({ host: ADDR.server, port: IPERF_PORT });
      try {
        for (const streams of [1, 4]) {
          process.stdout.write(`measuring ${path.name}, iperf3 ${streams} stream(s), ${seconds} s … `);
          const value = await iperfThroughput({
            host: open.host,
            port: open.port,
            seconds,
            streams,
            cpu: LOAD_CPU,
          });
          console.log(`${value.toFixed(1)} MB/s`);
          results.push({
            path: path.name,
            workload: `iperf3 ${streams} stream${streams > 1 ? 's' : ''}`,
            metric: 'throughput',
            value,
            unit: 'MB/s',
          });
        }
      } finally {
        await open.close();
      }
    }
  } finally {
    await stopChild(iperf);
    await rm(dir, { recursive: true, force: true });
  }
  printTable(results);
  if (opts.json) await writeFile(opts.json, `${JSON.stringify({ results }, null, 2)}\n`);
  if (opts.png) {
    const rows = results.map((r) => ({ group: `${r.workload} (${r.unit})`, series: r.path, value: r.value }));
    await writeFile(
      opts.png,
      await barChartPng(rows, { title: 'zmesh bench (same run, same machine)', unit: 'MB/s' }),
    );
  }
  return 0;
}

function printTable(results: BenchResult[]): void {
  const rows: string[][] = [['workload', 'path', 'value', 'vs direct', 'vs best C peer']];
  for (const workload of new Set(results.map((r) => r.workload))) {
    const of = results.filter((r) => r.workload === workload);
    const direct = of.find((r) => r.path === 'direct')?.value;
    const bestC = Math.max(...of.filter((r) => C_PEERS.includes(r.path)).map((r) => r.value));
    for (const r of of) {
      rows.push([
        workload,
        r.path,
        `${r.value.toFixed(1)} ${r.unit}`,
        direct ? `${(r.value / direct).toFixed(2)}×` : '-',
        Number.isFinite(bestC) ? `${(r.value / bestC).toFixed(2)}×` : '-',
      ]);
    }
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log('');
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(widths[i]!)).join('  '));
}
