import { quantile } from '../bench/stats.js';

/**
 * Load programs for the noisy-neighbor harness, run inside pods as `node -e` (pinned to
 * the load CPU with taskset by the caller). Each bounds itself in count and time and
 * prints one JSON line.
 */

/**
 * 1 KiB HTTP responses on :8080, a byte sink on :9000, a firehose (never stops sending) on
 * :9100, and on :9200 a sink that greets each connection with one byte, so a client can
 * tell a connection the mesh carried end to end from one it accepted and then refused.
 */
export const SERVERS = `
const net = require('net'), http = require('http');
const body = Buffer.alloc(1024, 120);
http.createServer((req, res) => { req.resume(); res.end(body); }).listen(8080, '::');
net.createServer((s) => { s.on('error', () => {}); s.resume(); }).listen(9000, '::');
net.createServer((s) => {
  s.on('error', () => {});
  const chunk = Buffer.alloc(64 * 1024, 1);
  const pump = () => { while (!s.destroyed && s.write(chunk)); };
  s.on('drain', pump); pump();
}).listen(9100, '::');
net.createServer((s) => { s.on('error', () => {}); s.resume(); s.write('+'); })
  .listen(9200, '::', () => console.log(JSON.stringify({ listening: true })));
`;

/**
 * The victim: 1 KiB HTTP GETs over keep-alive connections, either closed-loop (\`rate\` 0:
 * as fast as \`concurrency\` allows, to find saturation) or at a fixed rate, plus one bulk
 * upload stream to :9000 for the whole run. Every 20th request goes on a fresh
 * connection, as clients recycle theirs, so the victim's connection setups also meet the
 * aggressor's in the shared setup queue. Latency is measured from the scheduled send time,
 * so a stalled proxy cannot hide queueing (no coordinated omission).
 *
 * The first \`warmupMs\` run the same load unmeasured; the next \`durationMs\` count.
 * Without it a run's p99 was mostly its own first quarter second: a fresh node process
 * compiling, its 16 connections and the bulk stream being set up (up to 59 of the ~100
 * requests above the p99 came from there, with no attack at all).
 */
export const VICTIM = `
const http = require('http'), net = require('net');
const [host, rate, durationMs, concurrency, warmupMs] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
const lat = []; let ok = 0, failed = 0, inflight = 0; const t0 = Date.now();
const m0 = t0 + warmupMs, endAt = m0 + durationMs;
let bulkBytes = 0;
const bulk = net.connect({ host, port: 9000 });
const chunk = Buffer.alloc(64 * 1024, 2);
bulk.on('error', () => {});
const pump = () => { while (Date.now() < endAt && bulk.write(chunk)) if (Date.now() >= m0) bulkBytes += chunk.length; };
bulk.on('connect', pump); bulk.on('drain', pump);
let issued = 0;
function one(scheduled) {
  const counted = scheduled >= m0;
  inflight++;
  const fresh = issued++ % 20 === 19;
  const req = http.get({ host, port: 8080, path: '/', agent: fresh ? false : agent, timeout: 5000 }, (res) => {
    res.resume();
    res.on('end', () => { inflight--; if (counted) { ok++; lat.push(Date.now() - scheduled); } next(); });
  });
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.on('error', () => { inflight--; if (counted) { failed++; lat.push(5000); } next(); });
}
function next() { if (rate === 0 && Date.now() < endAt) one(Date.now()); }
if (rate === 0) for (let i = 0; i < concurrency; i++) one(Date.now());
else {
  let sent = 0;
  const tick = setInterval(() => {
    const due = Math.floor(((Date.now() - t0) / 1000) * rate);
    while (sent < due) { one(t0 + (sent * 1000) / rate); sent++; }
    if (Date.now() >= endAt) clearInterval(tick);
  }, 2);
}
const finish = () => {
  lat.sort((a, b) => a - b);
  const quantile = ${quantile};
  const q = (p) => quantile(lat, p);
  const secs = durationMs / 1000;
  console.log(JSON.stringify({ ok, failed, rps: ok / secs, p50_ms: q(0.5), p99_ms: q(0.99), bulk_mb_s: bulkBytes / secs / 1e6 }));
  process.exit(0);
};
setTimeout(() => { bulk.destroy(); const wait = setInterval(() => { if (inflight === 0 || Date.now() > endAt + 6000) { clearInterval(wait); finish(); } }, 20); }, warmupMs + durationMs);
`;

/**
 * The aggressor, one scenario at a time: \`storm\` opens as many connections as it can
 * (1000 at a time); \`flood\` pushes 32 bulk streams; \`slow\` opens 64 firehose streams and
 * never reads; \`hoard\` holds as many idle connections as it can (up to 4000). Storm and
 * hoard count a connection admitted only when the server's greeting came back through
 * the mesh: the in-pod listener accepts every TCP handshake, refusals come after.
 */
export const AGGRESSOR = `
const net = require('net');
const [scenario, host, durationMs] = process.argv.slice(1).map((v, i) => (i === 2 ? Number(v) : v));
const t0 = Date.now(); let admitted = 0, refused = 0; const open = [];
const live = () => Date.now() - t0 < durationMs;
function conn(port, onUp) {
  const s = net.connect({ host, port });
  s.on('error', () => {});
  s.once('connect', () => onUp(s));
  return s;
}
if (scenario === 'storm') {
  const one = () => {
    if (!live()) return;
    const s = net.connect({ host, port: 9200 });
    let up = false;
    s.once('data', () => { up = true; s.end('x'); });
    s.on('error', () => {});
    s.on('close', () => { if (up) admitted++; else refused++; one(); });
  };
  for (let i = 0; i < 1000; i++) one();
} else if (scenario === 'flood') {
  const chunk = Buffer.alloc(64 * 1024, 3);
  for (let i = 0; i < 32; i++) {
    const s = conn(9000, () => { admitted++; const pump = () => { while (live() && s.write(chunk)); }; s.on('drain', pump); pump(); });
    s.on('close', () => { if (!s.bytesWritten) refused++; });
    open.push(s);
  }
} else if (scenario === 'slow') {
  for (let i = 0; i < 64; i++) {
    const s = conn(9100, () => { admitted++; s.pause(); });
    s.on('close', () => { if (!s.readableLength && !s.bytesRead) refused++; });
    open.push(s);
  }
} else if (scenario === 'hoard') {
  let pending = 0;
  const more = () => {
    while (live() && pending < 100 && admitted + refused < 4000) {
      pending++;
      const s = net.connect({ host, port: 9200 });
      let up = false;
      s.once('data', () => { up = true; pending--; admitted++; more(); });
      s.on('error', () => {});
      s.on('close', () => { if (!up) { pending--; refused++; more(); } });
      open.push(s);
    }
  };
  more();
}
setTimeout(() => {
  for (const s of open) s.destroy();
  console.log(JSON.stringify({ scenario, admitted, refused }));
  process.exit(0);
}, durationMs);
`;
