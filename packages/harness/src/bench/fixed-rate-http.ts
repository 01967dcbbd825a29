import { execa } from 'execa';
import type { Endpoint } from './endpoint.js';
import { quantile } from './stats.js';

/**
 * Fixed-rate 1 KiB HTTP/1.1 GETs over keep-alive connections, in a child node process;
 * each latency counts from the request's scheduled send time, so a stalled proxy cannot
 * hide by slowing the sender down. Requests scheduled in the first `warmupMs` are sent at
 * the same rate but not counted: a fresh proxy compiles its data path (and the client's
 * keep-alive connections open) in its first second or two, and counting them put a few
 * hundred milliseconds into every p99. The child prints one `{"measuring":true}` line when
 * the counted window opens and one line of results after it.
 */
const SCRIPT = `
const http = require('http');
const { performance } = require('perf_hooks');
const [host, port, rate, warmupMs, durationMs, conns, path] = process.argv.slice(1).map((v, i) => (i === 0 || i === 6 ? v : Number(v)));
const agent = new http.Agent({ keepAlive: true, maxSockets: conns });
const lat = []; let ok = 0, failed = 0, inflight = 0, sent = 0, measuring = false;
const t0 = performance.now(); const total = warmupMs + durationMs;
function one(at, counted) {
  inflight++;
  const req = http.get({ host, port, path, agent, timeout: 5000 }, (res) => {
    res.resume();
    res.on('end', () => { inflight--; if (counted) { ok++; lat.push(performance.now() - at); } });
  });
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.on('error', () => { inflight--; if (counted) failed++; });
}
const tick = setInterval(() => {
  const elapsed = performance.now() - t0;
  if (!measuring && elapsed >= warmupMs) { measuring = true; console.log(JSON.stringify({ measuring: true })); }
  const due = Math.floor((Math.min(elapsed, total) / 1000) * rate);
  while (sent < due) { const at = t0 + (sent * 1000) / rate; one(at, at - t0 >= warmupMs); sent++; }
  if (elapsed >= total) clearInterval(tick);
}, 1);
setTimeout(() => { const w = setInterval(() => { if (inflight === 0 || performance.now() - t0 > total + 5000) { clearInterval(w);
  lat.sort((a, b) => a - b); const quantile = ${quantile}; const q = (p) => Math.round(10 * quantile(lat, p)) / 10;
  console.log(JSON.stringify({ ok, failed, rps: ok / (durationMs / 1000), p50_ms: q(0.5), p99_ms: q(0.99) })); process.exit(0); } }, 20); }, total);
`;

export interface FixedRateResult {
  ok: number;
  failed: number;
  /** Counted requests answered per second of the counted window. */
  rps: number;
  p50_ms: number | null;
  p99_ms: number | null;
}

export interface FixedRateOptions {
  rate: number;
  warmupSeconds: number;
  seconds: number;
  connections: number;
  /** CPU the generator is pinned to (taskset). */
  cpu: string;
  path?: string;
  /** Called when the counted window opens: where the caller starts reading CPU. */
  onMeasuring?: () => void;
}

export async function fixedRateHttp(at: Endpoint, o: FixedRateOptions): Promise<FixedRateResult> {
  const argv = [
    at.host,
    String(at.port),
    String(o.rate),
    String(o.warmupSeconds * 1000),
    String(o.seconds * 1000),
    String(o.connections),
    o.path ?? '/',
  ];
  const child = execa('taskset', ['-c', o.cpu, process.execPath, '-e', SCRIPT, ...argv], {
    reject: false,
    timeout: (o.warmupSeconds + o.seconds) * 1000 + 30_000,
    lines: true,
  });
  let marked = false;
  let head = ''; // what came before the marker: it may arrive split across reads
  child.stdout.on('data', (d: Buffer) => {
    if (marked) return;
    head += d.toString();
    if (head.includes('"measuring"')) {
      marked = true;
      o.onMeasuring?.();
    }
  });
  const run = await child;
  const last = run.stdout.at(-1);
  if (!marked || !last || last.includes('"measuring"')) {
    throw new Error(
      `fixed-rate HTTP load: no result (${run.stderr.join(' ').slice(0, 300) || run.exitCode})`,
    );
  }
  return JSON.parse(last) as FixedRateResult;
}
