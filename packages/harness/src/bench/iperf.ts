import { execa, type ResultPromise } from 'execa';
import { type Launch, runClient } from './request-load.js';

/** iperf3 as the bulk-throughput load: server pinned with the load generators. */
export function startIperfServer(host: string, port: number, cpu: string): ResultPromise {
  return execa('taskset', ['-c', cpu, 'iperf3', '-s', '-B', host, '-p', String(port)], {
    reject: false,
    stdio: 'ignore',
  });
}

export interface IperfReading {
  /** Megabytes per second received by the server over the measured seconds. */
  mbs: number;
  /** Megabytes received over the whole run, the omitted warm-up included (for CPU per byte). */
  megabytes: number;
}

interface IperfInterval {
  sum?: { bytes?: number; omitted?: boolean };
}

/**
 * iperf3 with `streams` parallel streams for `omitSeconds` unmeasured (iperf3's `-O`), then
 * `seconds` measured.
 */
export async function iperfThroughput(opts: {
  host: string;
  port: number;
  seconds: number;
  omitSeconds: number;
  streams: number;
  cpu: string;
  launch?: Launch;
}): Promise<IperfReading> {
  const args = [
    '-c',
    opts.host,
    '-p',
    String(opts.port),
    '-t',
    String(opts.seconds),
    '-O',
    String(opts.omitSeconds),
    '-P',
    String(opts.streams),
    '-J',
  ];
  const timeoutMs = (opts.seconds + opts.omitSeconds + 20) * 1000;
  const run = await runClient(['iperf3', ...args], opts.cpu, opts.launch, timeoutMs);
  let report: {
    end?: { sum_received?: { bits_per_second?: number; bytes?: number } };
    intervals?: IperfInterval[];
    error?: string;
  };
  try {
    report = JSON.parse(run.stdout) as typeof report;
  } catch {
    throw new Error(`iperf3 printed no report: ${run.stderr || run.stdout}`.slice(0, 300));
  }
  const received = report.end?.sum_received;
  if (report.error || received?.bits_per_second === undefined || received.bytes === undefined)
    throw new Error(`iperf3: ${report.error ?? 'no result'}`);
  // The summary leaves the omitted intervals out; the client's intervals count them.
  let omitted = 0;
  for (const i of report.intervals ?? []) if (i.sum?.omitted) omitted += i.sum.bytes ?? 0;
  return { mbs: received.bits_per_second / 8 / 1e6, megabytes: (received.bytes + omitted) / 1e6 };
}
