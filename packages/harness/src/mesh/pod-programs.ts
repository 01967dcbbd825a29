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
