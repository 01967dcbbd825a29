import { writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import type { Endpoint } from './endpoint.js';
import { quantile } from './stats.js';

/** Wraps a load generator's argv to run it where a path's clients run (OpenPath.launch). */
export type Launch = (argv: string[]) => string[];

/** Runs argv (pinned to `cpu`) where the path's clients run: here, or through `launch`. */
export function runClient(argv: string[], cpu: string, launch: Launch | undefined, timeout: number) {
  const [file, ...args] = (launch ?? ((a: string[]) => a))(['taskset', '-c', cpu, ...argv]);
  return execa(file!, args, { reject: false, timeout });
}

/**
 * Runs one of this module's in-process loads where the path's clients run: in this
 * process, or in a node child started through `launch` that imports this very module,
 * so a pod's client runs the same code. The load's result crosses as one JSON line.
 */
export async function runLoad<A extends unknown[], R>(
  launch: Launch | undefined,
  cpu: string,
  load: (...args: A) => Promise<R>,
  args: A,
): Promise<R> {
  if (!launch) return load(...args);
  const script =
    `const m = await import(${JSON.stringify(import.meta.url)});` +
    `const r = await m[${JSON.stringify(load.name)}](...${JSON.stringify(args)});` +
    'console.log(JSON.stringify(r)); process.exit(0);';
  const run = await runClient([process.execPath, '--input-type=module', '-e', script], cpu, launch, 180_000);
  const line = run.stdout.trim().split('\n').pop();
  if (run.exitCode !== 0 || !line) {
    throw new Error(`${load.name} in the client pod: ${(run.stderr || run.stdout).slice(0, 300)}`);
  }
  return JSON.parse(line) as R;
}

/** One redis-benchmark test (SET or GET): requests per second and p50 in ms. */
export async function redisBenchmark(
  at: Endpoint,
  opts: { test: 'set' | 'get'; requests: number; cpu: string; launch?: Launch },
) {
  const args = [
    '-h',
    at.host,
    '-p',
    String(at.port),
    '-c',
    '50',
    '-n',
    String(opts.requests),
    '-t',
    opts.test,
  ];
  const run = await runClient(['redis-benchmark', ...args, '--csv'], opts.cpu, opts.launch, 120_000);
  // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
  const row = run.stdout
    .split('\n')
    .find((l) => l.startsWith(`"${opts.test.toUpperCase()}"`))
    ?.split(',')
    .map((c) => Number(c.replaceAll('"', '')));
  if (!row || !Number.isFinite(row[1]))
    throw new Error(`redis-benchmark: ${(run.stderr || run.stdout).slice(0, 300)}`);
  return { rps: row[1]!, p50Ms: row[4]! };
}

/**
 * Request/response latency over one connection: `roundTrips` 64-byte pings, each sent when
 * the previous echo is back. Returns p50 and p99 in µs. The pings of the first `warmupMs`
 * (and at least the first 200, or a fifth of `roundTrips` if fewer) are not counted.
 */
export async function echoLatency(
  at: Endpoint,
  roundTrips: number,
  warmupMs = 0,
): Promise<{ p50: number; p99: number }> {
  const socket = await open(at);
  socket.setNoDelay(true);
  const ping = Buffer.alloc(64, 'p');
  const samples: number[] = [];
  const minWarmup = Math.min(200, Math.floor(roundTrips / 5));
  const warmUntil = process.hrtime.bigint() + BigInt(Math.round(warmupMs * 1e6));
  let warmed = 0;
  let counting = false;
  try {
    await new Promise<void>((resolve, reject) => {
      let got = 0;
      let sent = process.hrtime.bigint();
      socket.on('error', reject);
      socket.on('close', () => reject(new Error('echo connection closed')));
      socket.on('data', (chunk: Buffer) => {
        got += chunk.length;
        if (got < ping.length) return;
        got -= ping.length;
        const now = process.hrtime.bigint();
        counting ||= warmed >= minWarmup && now >= warmUntil;
        if (!counting) warmed++;
        else {
          samples.push(Number(now - sent) / 1000);
          if (samples.length >= roundTrips) return resolve();
        }
        sent = process.hrtime.bigint();
        socket.write(ping);
      });
      socket.write(ping);
    });
  } finally {
    socket.destroy();
  }
  const sorted = samples.sort((a, b) => a - b);
  return { p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99) };
}

/**
 * New connections per second: `concurrency` loops, each connecting, exchanging one byte
 * with the echo server (so the connection is known to reach the far end) and closing.
 */
export async function connectionRate(at: Endpoint, opts: { seconds: number; concurrency: number }) {
  const deadline = Date.now() + opts.seconds * 1000;
  let done = 0;
  let failed = 0;
  const loop = async () => {
    while (Date.now() < deadline) {
      try {
        const s = await open(at);
        await exchangeByte(s);
        s.destroy();
        done += 1;
      } catch {
        failed += 1;
        if (failed > 100) throw new Error(`connection rate: ${failed} connections failed`);
      }
    }
  };
  const started = Date.now();
  await Promise.all(Array.from({ length: opts.concurrency }, loop));
  return done / ((Date.now() - started) / 1000);
}

export function open(at: Endpoint): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: at.host, port: at.port, noDelay: true });
    s.once('connect', () => {
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}

/** Writes one byte and resolves when the echo server's copy is back. */
export function exchangeByte(s: Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error('no echo within 10 s')), 10_000);
    const fail = (e: Error) => {
      clearTimeout(timer);
      s.destroy();
      reject(e);
    };
    s.once('data', () => {
      clearTimeout(timer);
      s.off('error', fail);
      resolve();
    });
    s.once('error', fail);
    s.write('x');
  });
}

/**
 * HTTP at a fixed rate with wrk: each wrk thread paces its requests on a monotonic clock
 * (LuaJIT ffi clock_gettime) through wrk's `delay()` hook, so the offered load is
 * `rate` req/s whatever the path's latency (as long as `connections` suffice).
 */
export async function fixedRateHttp(
  at: Endpoint,
  opts: { rate: number; seconds: number; connections: number; cpu: string; dir: string; launch?: Launch },
) {
  const script = join(opts.dir, 'fixed-rate.lua');
  await writeFile(script, fixedRateLua(1000 / opts.rate));
  const args = [
    '-t1',
    `-c${opts.connections}`,
    `-d${opts.seconds}s`,
    '-s',
    script,
    `http://${at.host}:${at.port}/`,
  ];
  const run = await runClient(['wrk', ...args], opts.cpu, opts.launch, 60_000);
  const line = run.stdout.split('\n').find((l) => l.startsWith('{"requests"'));
  if (!line) throw new Error(`wrk: ${(run.stderr || run.stdout).slice(0, 300)}`);
  const r = JSON.parse(line) as {
    requests: number;
    duration_us: number;
    p50_us: number;
    p99_us: number;
    errors: number;
  };
  if (r.errors > 0) throw new Error(`wrk: ${r.errors} errors`);
  return { rps: r.requests / (r.duration_us / 1e6), p50Ms: r.p50_us / 1000, p99Ms: r.p99_us / 1000 };
}

function fixedRateLua(intervalMs: number): string {
  return `local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *ts);
]]
local ts = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
local interval = ${intervalMs}
local due = nil
function delay()
  local t = now_ms()
  if due == nil then due = t end
  local wait = due - t
  due = due + interval
  if wait < 0 then return 0 end
  return math.floor(wait)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"errors":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
`;
}
