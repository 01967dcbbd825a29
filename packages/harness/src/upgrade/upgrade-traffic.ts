/**
 * The upgrade drill's client (run as `node -e` in a pod, against the outage drill's
 * STEADY_SERVER): UPGRADE_CLIENT host port durationMs longLived.
 * - Every 50 ms a new connection to host:port (the server answers and closes): ok when an
 *   answer came back within 2 s.
 * - `longLived` connections to host:port+1 (an echo), each pinging every 100 ms; broken when
 *   one closes or errs before the end, or a ping goes 2 s without its echo.
 * After `durationMs`, or sooner when a line `stop` arrives on stdin, the long-lived
 * connections are ended (FIN, as an app closing them) and one JSON line is printed:
 * UpgradeTrafficResult.
 */
export const UPGRADE_CLIENT = `
const net = require('net');
const [host, port, duration, longLived] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3]), Number(process.argv[4])];
const r = { newOk: 0, newFailed: 0, newErrors: {}, newFailedAt: [], liveBroken: 0, liveErrors: {}, pings: 0, pongs: 0, endedAt: 0 };
let ending = false, pending = 0;
const count = (m, k) => { m[k] = (m[k] || 0) + 1; };
function fresh() {
  pending++;
  const started = Date.now();
  const s = net.connect({ host, port });
  let data = '', err = '';
  const timer = setTimeout(() => s.destroy(new Error('TIMEOUT')), 2000);
  s.on('data', (d) => { data += d; });
  s.on('error', (e) => { err = e.code || e.message; });
  s.on('close', () => { clearTimeout(timer); pending--; if (data) r.newOk++; else { r.newFailed++; r.newFailedAt.push(started); count(r.newErrors, err || 'no answer'); } });
}
const lives = [];
for (let i = 0; i < longLived; i++) {
  const s = net.connect({ host, port: port + 1 });
  s.setNoDelay(true);
  let waiting = 0, broken = false;
  const brk = (why) => { if (broken || ending) return; broken = true; r.liveBroken++; count(r.liveErrors, why); s.destroy(); };
  s.on('error', (e) => brk(e.code || e.message));
  s.on('close', () => brk('closed'));
  s.on('data', () => { if (waiting) { r.pongs++; waiting = 0; } });
  const tick = setInterval(() => {
    if (broken || ending) return clearInterval(tick);
    if (waiting && Date.now() - waiting > 2000) return brk('TIMEOUT');
    if (!waiting) { waiting = Date.now(); r.pings++; s.write('ping'); }
  }, 100);
  lives.push(s);
}
const every = setInterval(fresh, 50);
let finished = false;
const finish = () => {
  if (finished) return;
  finished = true;
  clearInterval(every);
  ending = true;
  r.endedAt = Date.now();
  for (const s of lives) s.end();
  const done = setInterval(() => { if (pending === 0) { clearInterval(done); console.log(JSON.stringify(r)); process.exit(0); } }, 50);
};
setTimeout(finish, duration);
process.stdin.on('data', (d) => { if (String(d).includes('stop')) finish(); });
process.stdin.on('error', () => {});
`;

export interface UpgradeTrafficResult {
  newOk: number;
  newFailed: number;
  newErrors: Record<string, number>;
  /** Wall-clock ms at which each failed new connection was opened. */
  newFailedAt: number[];
  liveBroken: number;
  liveErrors: Record<string, number>;
  pings: number;
  pongs: number;
  /** Wall-clock ms when the long-lived connections were ended. */
  endedAt: number;
}
