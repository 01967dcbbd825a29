import { slope } from '../bench/stats.js';

/**
 * The soak's verdict: a series of samples per process, and per series the slope of its floor
 * over the second half against a limit per minute (docs/hardening.md, "Soak").
 */
export interface SoakSample {
  /** Seconds since the mix started. */
  t: number;
  rssBytes: number;
  fds: number;
  /** V8 heap committed (nodejs_heap_size_total_bytes). */
  heapBytes: number;
  /** Event-loop delay p99 over the sample's interval, seconds (nodejs_eventloop_lag_p99_seconds). */
  loopDelay: number;
}

export interface SoakSeries {
  name: SeriesName;
  /** Least-squares slope over the second half of the run, per minute. */
  slopePerMinute: number;
  limitPerMinute: number;
  first: number;
  last: number;
  max: number;
  passed: boolean;
}

export type SeriesName = 'rss' | 'fds' | 'heap' | 'loopDelay';
const SERIES: readonly SeriesName[] = ['rss', 'fds', 'heap', 'loopDelay'];
const seriesValue: Record<SeriesName, (s: SoakSample) => number> = {
  rss: (s) => s.rssBytes,
  fds: (s) => s.fds,
  heap: (s) => s.heapBytes,
  loopDelay: (s) => s.loopDelay,
};

/**
 * Limits for one control-plane incarnation of `span` seconds: RSS, heap and fds as for a
 * run that long. Its event-loop delay is judged only from five minutes on: at the default
 * period (3 minutes) the second half is ~90 s, and there the delay's floor moves with the
 * machine's load, not with the process (a 30-minute run at load 20: one incarnation's floor
 * went from 105 to ~120 ms within it, 21.6 ms/min, while every proxy's stayed under 5 ms/min
 * over 15 minutes).
 */
export function cpLimits(span: number): Record<SeriesName, number> {
  const limits = soakLimits(span);
  return span >= 300 ? limits : { ...limits, loopDelay: Number.POSITIVE_INFINITY };
}

/**
 * Growth allowed per minute over the second half. From five minutes on, 8 MiB of RSS or heap,
 * 20 fds and 10 ms of event-loop delay (p99) a minute: a 5-minute run's second half starts
 * after JIT and heap warm-up (RSS and heap rise for about 3 minutes before V8's first major
 * collection levels them), and the pre-TLS idlers make fds swing by a few dozen. A shorter
 * run (CI's two minutes) is still in warm-up, and its second half is a few samples of fds that swing by 40
 * (idlers) plus the slow readers' and slow workloads' held sockets, so it only catches gross
 * growth: 256 MiB or 200 fds a minute (with the authenticated floods, a 20 s run on a loaded
 * 2-core machine warms up by up to 135 MiB a minute; the CONTINUATION flood of issue 38 grew
 * by 5 GB a minute, the reset leak the soak found by 900 fds a minute). Its event-loop delay
 * is reported, not judged: over 20 s on a machine at load 20 it swings from 200 ms to 1 s.
 */
export function soakLimits(seconds: number): Record<SeriesName, number> {
  return seconds >= 300
    ? { rss: 8 * 2 ** 20, heap: 8 * 2 ** 20, fds: 20, loopDelay: 0.01 }
    : { rss: 256 * 2 ** 20, heap: 256 * 2 ** 20, fds: 200, loopDelay: Number.POSITIVE_INFINITY };
}

/** Windows the second half is cut into; the verdict fits their minima. */
const SOAK_WINDOWS = 5;

/**
 * Per series: the slope (per minute) of its floor over the second half of the run, against
 * its limit. The second half is cut into SOAK_WINDOWS windows and the least-squares line is
 * fitted to each window's minimum: the idlers make fds swing and RSS dips when memory is
 * given back, so a fit to every sample follows the noise; a leak raises the floor.
 */
export function judge(samples: SoakSample[], limits: Record<SeriesName, number>): SoakSeries[] {
  const half = samples.slice(Math.floor(samples.length / 2));
  const per = Math.max(1, Math.floor(half.length / SOAK_WINDOWS));
  return SERIES.map((name) => {
    const value = seriesValue[name];
    const floors: Array<[number, number]> = [];
    for (let i = 0; i + per <= half.length; i += per) {
      const window = half.slice(i, i + per);
      const low = window.reduce((a, b) => (value(b) < value(a) ? b : a));
      floors.push([low.t / 60, value(low)]);
    }
    const perMinute = slope(floors);
    const values = samples.map(value);
    return {
      name,
      slopePerMinute: perMinute,
      limitPerMinute: limits[name],
      first: values[0] ?? 0,
      last: values.at(-1) ?? 0,
      max: Math.max(...values),
      passed: perMinute < limits[name],
    };
  });
}
