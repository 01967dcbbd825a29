import { performance } from 'node:perf_hooks';
import { startL7Lab } from '../demo/l7-lab.js';
import { fixedRateHttp } from './fixed-rate-http.js';
import { processCpuSecondsSync, residentSetSync } from './proc-stat.js';

export interface WaypointBenchRow {
  path: 'ztunnel only' | 'ztunnel → waypoint → ztunnel';
  rps: number;
  p50_ms: number;
  p99_ms: number;
  failed: number;
  /** vCPU the waypoint used per 1,000 requests/s (waypoint path only). */
  waypoint_vcpu_per_1000rps?: number;
  waypoint_rss_mb?: number;
}

const RATE = 1000;

/**
 * Issue 6's reading: 1,000 requests/s of 1 KiB HTTP through the ztunnel-only path and
 * through the waypoint, in one run (the L7 lab, explicit-proxy mode on loopback); the
 * load generator runs on CPU 1. The waypoint's CPU is read over the counted window only,
 * after the warm-up.
 */
export async function runWaypointBench(opts: { quick?: boolean } = {}): Promise<WaypointBenchRow[]> {
  const seconds = opts.quick ? 3 : 10;
  // The same load unmeasured first (see fixed-rate-http.ts), long enough for what queued
  // while the proxies' new paths were compiled to drain: 3-5 s through a waypoint that
  // had never served traffic (warm-up.ts in the waypoint package).
  const warmupSeconds = opts.quick ? 1 : 5;
  const lab = await startL7Lab();
  try {
    const rows: WaypointBenchRow[] = [];
    for (const on of [false, true]) {
      await lab.l7(on);
      // The waypoint runs under bin/zmesh (bash exec → node): this pid is node's, whose
      // own CPU and RSS are what the row reads.
      const pid = lab.waypointPid();
      let cpu0 = 0;
      let t0 = 0;
      const stats = await fixedRateHttp(lab.entry, {
        rate: RATE,
        warmupSeconds,
        seconds,
        connections: 32,
        cpu: '1',
        path: '/public',
        onMeasuring: () => {
          cpu0 = pid ? processCpuSecondsSync(pid) : 0;
          t0 = performance.now();
        },
      });
      const row: WaypointBenchRow = {
        path: on ? 'ztunnel → waypoint → ztunnel' : 'ztunnel only',
        rps: stats.rps,
        p50_ms: stats.p50_ms ?? Number.NaN,
        p99_ms: stats.p99_ms ?? Number.NaN,
        failed: stats.failed,
      };
      if (on && pid) {
        const wall = (performance.now() - t0) / 1000;
        row.waypoint_vcpu_per_1000rps = (processCpuSecondsSync(pid) - cpu0) / wall / (stats.rps / 1000);
        row.waypoint_rss_mb = residentSetSync(pid).rss / 2 ** 20;
      }
      rows.push(row);
    }
    return rows;
  } finally {
    await lab.stop();
  }
}

export function waypointTable(rows: WaypointBenchRow[]): string {
  const base = rows.find((r) => r.path === 'ztunnel only');
  const lines = [
    ['path', 'rps', 'p50 ms', 'p99 ms', 'p50 ratio', 'p99 ratio', 'waypoint vCPU/1000rps', 'waypoint RSS MB'],
  ];
  for (const r of rows) {
    lines.push([
      r.path,
      r.rps.toFixed(0),
      String(r.p50_ms),
      String(r.p99_ms),
      base ? `${(r.p50_ms / Math.max(1, base.p50_ms)).toFixed(2)}×` : '-',
      base ? `${(r.p99_ms / Math.max(1, base.p99_ms)).toFixed(2)}×` : '-',
      r.waypoint_vcpu_per_1000rps?.toFixed(3) ?? '-',
      r.waypoint_rss_mb?.toFixed(0) ?? '-',
    ]);
  }
  const w = lines[0]!.map((_, i) => Math.max(...lines.map((l) => l[i]!.length)));
  return lines.map((l) => l.map((c, i) => c.padEnd(w[i]!)).join('  ')).join('\n');
}
