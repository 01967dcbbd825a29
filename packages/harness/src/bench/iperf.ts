import { execa, type ResultPromise } from 'execa';
import { type Launch, runClient } from './request-load.js';

/** iperf3 as the bulk-throughput load: server pinned with the load generators. */
export function startIperfServer(host: string, port: number, cpu: string): ResultPromise {
  return execa('taskset', ['-c', cpu, 'iperf3', '-s', '-B', host, '-p', String(port)], {
    reject: false,
    stdio: 'ignore',
  });
}

/** Megabytes per second received by the server over `seconds`, with `streams` parallel streams. */
export async function iperfThroughput(opts: {
  host: string;
  port: number;
  seconds: number;
  streams: number;
  cpu: string;
  launch?: Launch;
}): Promise<number> {
  const args = [
    '-c',
    opts.host,
    '-p',
    String(opts.port),
    '-t',
    String(opts.seconds),
    '-P',
    String(opts.streams),
    '-J',
  ];
  const run = await runClient(['iperf3', ...args], opts.cpu, opts.launch, (opts.seconds + 20) * 1000);
  let report: { end?: { sum_received?: { bits_per_second?: number } }; error?: string };
  try {
    report = JSON.parse(run.stdout) as typeof report;
  } catch {
    throw new Error(`iperf3 printed no report: ${run.stderr || run.stdout}`.slice(0, 300));
  }
  const bps = report.end?.sum_received?.bits_per_second;
  if (report.error || bps === undefined) throw new Error(`iperf3: ${report.error ?? 'no result'}`);
  return bps / 8 / 1e6;
}
