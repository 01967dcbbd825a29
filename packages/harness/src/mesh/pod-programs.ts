import { quantile } from '../bench/stats.js';

/**
 * Small Node programs that run inside pods (as `node -e`), so tests and harnesses need
 * nothing in a pod but node. Each prints JSON lines on stdout.
 */

/**
 * Listens on [::]:port (dual stack); each connection is answered with the peer address the
 * server saw, then closed. A connection delivered by ztunnel arrives from inside the pod;
 * one that went around the mesh would show the real remote address.
 */
export const PEER_SERVER = `
const port = Number(process.argv[1]);
require('net').createServer((s) => { s.on('error', () => {}); s.end(String(s.remoteAddress)); })
  .listen(port, '::', () => console.log(JSON.stringify({ listening: port })));
`;

/**
 * Opens \`count\` connections to host:port at \`rate\` per second (bounded in count and time),
 * and prints one JSON summary: ok/failed counts, what getpeername said for the first,
 * the distinct answers (peer addresses the server saw) and error codes.
 */
export const RATE_CLIENT = `
const net = require('net');
const [host, port, count, rate, timeoutMs] = process.argv.slice(1).map((v, i) => (i === 0 ? v : Number(v)));
const out = { ok: 0, failed: 0, answers: {}, errors: {}, peer: null, ms: 0 };
const started = Date.now();
let started_n = 0, done = 0;
function one() {
  const s = net.connect({ host, port });
  let data = '';
  const timer = setTimeout(() => s.destroy(new Error('TIMEOUT')), timeoutMs);
  s.on('connect', () => { if (!out.peer) out.peer = { address: s.remoteAddress, port: s.remotePort }; });
  s.on('data', (d) => { data += d; });
  s.on('error', (e) => { out.errors[e.code || e.message] = (out.errors[e.code || e.message] || 0) + 1; });
  s.on('close', () => {
    clearTimeout(timer);
    if (data) { out.ok++; out.answers[data] = (out.answers[data] || 0) + 1; } else out.failed++;
    if (++done === count) { out.ms = Date.now() - started; console.log(JSON.stringify(out)); }
  });
}
const tick = setInterval(() => {
  const due = Math.min(count, Math.floor(((Date.now() - started) / 1000) * rate) + 1);
  while (started_n < due) { started_n++; one(); }
  if (started_n >= count) clearInterval(tick);
}, 5);
`;

export interface RateResult {
  ok: number;
  failed: number;
  answers: Record<string, number>;
  errors: Record<string, number>;
  peer: { address: string; port: number } | null;
  ms: number;
}

export function parseRateResult(stdout: string): RateResult {
  const line = stdout.trim().split('\n').pop() ?? '';
  return JSON.parse(line) as RateResult;
}

/** Echoes every byte back (for round-trip latency), on [::]:port. */
export const ECHO_SERVER = `
const port = Number(process.argv[1]);
require('net').createServer((s) => { s.on('error', () => {}); s.setNoDelay(true); s.pipe(s); })
  .listen(port, '::', () => console.log(JSON.stringify({ listening: port })));
`;

/**
 * Connection setup rate: \`count\` connect-and-close cycles, \`concurrency\` at a time, as fast
 * as they go; then \`rounds\` 1-byte round trips on one connection. Prints one JSON line:
 * { connPerSec, rttP50Us, rttP99Us, failed }.
 */
export const SETUP_AND_RTT = `
const net = require('net');
const [host, port, count, concurrency, rounds] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
let started = 0, done = 0, failed = 0; const t0 = process.hrtime.bigint();
function one() {
  if (started >= count) return;
  started++;
  const s = net.connect({ host, port });
  s.on('connect', () => s.end());
  s.on('error', () => { failed++; });
  s.on('close', () => { done++; if (done === count) rtt(); else one(); });
}
for (let i = 0; i < concurrency; i++) one();
function rtt() {
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const s = net.connect({ host, port }); s.setNoDelay(true);
  const lat = []; let sentAt = 0n;
  const ping = () => { sentAt = process.hrtime.bigint(); s.write('x'); };
  s.on('connect', ping);
  s.on('data', () => { lat.push(Number(process.hrtime.bigint() - sentAt) / 1000); if (lat.length < rounds) ping(); else { s.destroy(); report(secs, lat); } });
  s.on('error', (e) => { console.log(JSON.stringify({ error: e.code })); process.exit(1); });
}
function report(secs, lat) {
  lat.sort((a, b) => a - b);
  const quantile = ${quantile};
  const q = (p) => quantile(lat, p);
  console.log(JSON.stringify({ connPerSec: count / secs, rttP50Us: q(0.5), rttP99Us: q(0.99), failed }));
  process.exit(0);
}
`;

/** Answers every HTTP request on [::]:8080 with its method and path (as the pod saw them); prints `listening`. */
export const METHOD_ECHO_SERVER = `require('http').createServer((req, res) => { req.resume(); res.end(req.method + ' ' + req.url); })
  .listen(8080, '::', () => console.log('listening'));`;

/** Sends each `METHOD url` argument in turn; prints one JSON array of statuses (or error codes). */
export const REQUESTS_CLIENT = `
const out = [];
(async () => {
  for (const arg of process.argv.slice(1)) {
    const [method, url] = arg.split(' ');
    try { out.push((await fetch(url, { method, signal: AbortSignal.timeout(5000) })).status); }
    catch (e) { out.push(String(e.cause?.code ?? e.name)); }
  }
  console.log(JSON.stringify(out));
})();`;
