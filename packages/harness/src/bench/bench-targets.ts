import { type BenchReport, find, fmt } from './bench-results.js';
import { CLUSTER_WAYPOINT_PATH } from './cluster-paths.js';
import { WAYPOINT_PATH } from './waypoint-path.js';

/** The suffix of a path measured with the `--baseline` build. */
export const BEFORE = ' (before)';

export interface TargetCheck {
  target: string;
  measured: string;
  /** undefined when a number it needs is missing (a peer not installed). */
  met: boolean | undefined;
}

/**
 * The issue's targets for `zmesh` (the path named `path`), checked against one run's numbers.
 * A path on the netns cluster is held against the cluster's own direct path and C peers.
 */
export function checkTargets(report: BenchReport, path: string): TargetCheck[] {
  const get = (p: string, w: string, m: string) => find(report, p, w, m);
  const direct = report.paths.find((p) => p.name === path)?.direct ?? 'direct';
  // The C peers measured in the same setting (loopback, or the netns cluster).
  const cNames = report.paths
    .filter((p) => p.kind === 'c-mtls' && !p.l7Hop && (p.direct ?? 'direct') === direct)
    .map((p) => p.name);
  const out: TargetCheck[] = [];
  for (const w of ['iperf3 1 stream', 'iperf3 4 streams']) {
    const z = get(path, w, 'throughput');
    const best = Math.max(...cNames.map((c) => get(c, w, 'throughput') ?? 0));
    out.push(ratioCheck(`${w}: throughput ≥ 1.0× best C mTLS pair`, z, best > 0 ? best : undefined, 1.0));
  }
  for (const w of ['redis SET, 50 conns', 'redis GET, 50 conns']) {
    out.push(
      ratioCheck(
        `${w}: requests/s ≥ 0.5× direct`,
        get(path, w, 'requests/s'),
        get(direct, w, 'requests/s'),
        0.5,
      ),
    );
  }
  const zp50 = get(path, 'echo, 1 conn', 'added p50');
  const stunnel = cNames.find((n) => n.endsWith('stunnel4 pair'));
  const sp50 = stunnel ? get(stunnel, 'echo, 1 conn', 'added p50') : undefined;
  out.push({
    target: "one-connection added latency p50 ≤ stunnel4's",
    measured: `${fmt(zp50)} µs vs ${fmt(sp50)} µs`,
    met: zp50 === undefined || sp50 === undefined ? undefined : zp50 <= sp50,
  });
  const cpu = get(path, 'HTTP 1 KiB @ 1,000 rps', 'CPU per 1,000 rps');
  out.push({
    target: 'ztunnel ≤ 0.06 vCPU per 1,000 rps (each of the pair: pair ÷ 2)',
    measured: cpu === undefined ? '-' : `pair ${fmt(cpu)}, each ${fmt(cpu / 2)} vCPU`,
    met: cpu === undefined ? undefined : cpu / 2 <= 0.06,
  });
  // The waypoint's own process, on the waypoint path of the same run, setting (loopback or
  // the cluster) and build: a `before` path reads the `before` waypoint path.
  const waypointPath =
    (direct === 'direct' ? WAYPOINT_PATH : CLUSTER_WAYPOINT_PATH) + (path.endsWith(BEFORE) ? BEFORE : '');
  const hopCpu = (p: string) => get(p, 'HTTP 1 KiB @ 1,000 rps', 'waypoint CPU per 1,000 rps');
  const wcpu = hopCpu(waypointPath);
  // The L7-hop peers of the same setting, for scale: a C proxy's hop, and Node's own.
  const hops = report.paths
    .filter((p) => p.l7Hop && p.kind !== 'zmesh' && (p.direct ?? 'direct') === direct)
    .flatMap((p) => {
      const v = hopCpu(p.name);
      return v === undefined ? [] : [`${p.name} ${fmt(v)}`];
    });
  out.push({
    target: 'waypoint ≤ 0.25 vCPU per 1,000 rps',
    measured:
      wcpu === undefined ? '-' : `${fmt(wcpu)} vCPU${hops.length > 0 ? ` (hop of ${hops.join(', ')})` : ''}`,
    met: wcpu === undefined ? undefined : wcpu <= 0.25,
  });
  const rss = get(path, 'idle', 'RSS (largest process)');
  const anon = get(path, 'idle', 'anonymous RSS (largest process)');
  out.push({
    target: 'RSS ≤ 64 MB with 100 pods',
    measured:
      rss === undefined || anon === undefined
        ? `${fmt(rss)} MB`
        : `${fmt(rss)} MB (anonymous ${fmt(anon)}, file pages ${fmt(rss - anon)})`,
    met: rss === undefined ? undefined : rss <= 64,
  });
  const perConn = get(path, 'idle connections', 'memory per connection');
  out.push({
    target: '≤ 16 KiB per idle connection (each of the pair: pair ÷ 2)',
    measured: perConn === undefined ? '-' : `pair ${fmt(perConn)}, each ${fmt(perConn / 2)} KiB`,
    met: perConn === undefined ? undefined : perConn / 2 <= 16,
  });
  return out;
}

function ratioCheck(
  target: string,
  value: number | undefined,
  base: number | undefined,
  min: number,
): TargetCheck {
  if (value === undefined || base === undefined) return { target, measured: '-', met: undefined };
  const ratio = value / base;
  return { target, measured: `${ratio.toFixed(2)}× (${fmt(value)} vs ${fmt(base)})`, met: ratio >= min };
}

export function targetsText(checks: TargetCheck[]): string {
  return checks
    .map((c) => `${c.met === undefined ? '  ?' : c.met ? ' ok' : 'MISS'}  ${c.target}: ${c.measured}`)
    .join('\n');
}
