import { readFileSync } from 'node:fs';
import { execa } from 'execa';
import { startL7Lab } from '../demo/l7-lab.js';

/** Fixed-rate 1 KiB HTTP/1.1 GETs over keep-alive connections; latency from the scheduled send time. */
const FIXED_RATE_HTTP = `
const http = require('http');
const [host, port, rate, durationMs, conns] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const agent = new http.Agent({ keepAlive: true, maxSockets: conns });
const lat = []; let ok = 0, failed = 0, inflight = 0, sent = 0; const t0 = Date.now();
function one(at) {
  inflight++;
  const req = http.get({ host, port, path: '/public', agent, timeout: 5000 }, (res) => {
    res.resume(); res.on('end', () => { inflight--; ok++; lat.push(Date.now() - at); });
  });
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.on('error', () => { inflight--; failed++; });
}
const tick = setInterval(() => {
  const due = Math.floor(((Date.now() - t0) / 1000) * rate);
  while (sent < due) { one(t0 + (sent * 1000) / rate); sent++; }
  if (Date.now() - t0 >= durationMs) clearInterval(tick);
}, 1);
setTimeout(() => { const w = setInterval(() => { if (inflight === 0 || Date.now() - t0 > durationMs + 5000) { clearInterval(w);
  lat.sort((a, b) => a - b); const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] ?? null;
  console.log(JSON.stringify({ ok, failed, rps: ok / (durationMs / 1000), p50_ms: q(0.5), p99_ms: q(0.99) })); process.exit(0); } }, 20); }, durationMs);
`;

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
 * load generator runs on CPU 1.
 */
export async function runWaypointBench(opts: { quick?: boolean } = {}): Promise<WaypointBenchRow[]> {
  const seconds = opts.quick ? 3 : 10;
  const lab = await startL7Lab();
  try {
    const rows: WaypointBenchRow[] = [];
    for (const on of [false, true]) {
      await lab.l7(on);
      const pid = lab.waypointPid();
      const cpu0 = pid ? cpuSeconds(pid) : 0;
      const r = await execa(
        'taskset',
        [
          '-c',
          '1',
          'node',
          '-e',
          FIXED_RATE_HTTP,
          lab.entry.host,
          String(lab.entry.port),
          String(RATE),
          String(seconds * 1000),
          '32',
        ],
        { reject: false, timeout: seconds * 1000 + 30_000 },
      );
      const stats = JSON.parse(r.stdout.trim().split('\n').pop() || '{}') as Omit<WaypointBenchRow, 'path'>;
      const row: WaypointBenchRow = { path: on ? 'ztunnel → waypoint → ztunnel' : 'ztunnel only', ...stats };
      if (on && pid) {
        row.waypoint_vcpu_per_1000rps = (cpuSeconds(pid) - cpu0) / seconds / (stats.rps / 1000);
        row.waypoint_rss_mb =
          Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
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

function cpuSeconds(pid: number): number {
  // The waypoint runs under bin/zmesh (bash exec → node): the pid is node's.
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
