import type { ResultPromise } from 'execa';

/**
 * Pod programs for the outage drill (run as `node -e`, nothing else needed in a pod).
 * STEADY_SERVER: on :port answers each connection with the peer address it saw and closes
 * (ztunnel delivers from inside the pod, so any other answer means traffic went around the
 * mesh); on :port+1 echoes, for one long-lived connection.
 */
export const STEADY_SERVER = `
const net = require('net');
const port = Number(process.argv[1]);
net.createServer((s) => { s.on('error', () => {}); console.log(JSON.stringify({ t: Date.now(), k: 'accepted', from: s.remoteAddress })); s.end(String(s.remoteAddress)); })
  .listen(port, '::', () => console.log(JSON.stringify({ t: Date.now(), k: 'listening', port })));
net.createServer((s) => { s.on('error', () => {}); s.pipe(s); }).listen(port + 1, '::');
`;

/**
 * STEADY_CLIENT host port intervalMs: every interval opens a new connection to host:port
 * (k:'new', ok when an answer came back, with the answer) and sends one ping over a
 * long-lived connection to host:port+1 (k:'live'; a broken one is re-opened on the next
 * tick). One JSON line per outcome; each attempt is bounded by the interval times four.
 */
export const STEADY_CLIENT = `
const net = require('net');
const [host, port, every] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])];
const out = (o) => console.log(JSON.stringify({ t: Date.now(), ...o }));
function fresh() {
  const s = net.connect({ host, port });
  let data = '', err = '';
  const timer = setTimeout(() => s.destroy(new Error('TIMEOUT')), every * 4);
  s.on('data', (d) => { data += d; });
  s.on('error', (e) => { err = e.code || e.message; });
  s.on('close', () => { clearTimeout(timer); out({ k: 'new', ok: data !== '', answer: data || undefined, e: err || undefined }); });
}
let live, waiting = 0, opened = 0;
function ping() {
  if (!live || live.destroyed) {
    live = net.connect({ host, port: port + 1 });
    live.conn = ++opened;
    live.on('error', () => {});
    live.on('data', () => { if (waiting) { out({ k: 'live', ok: true, conn: live.conn, rtt: Date.now() - waiting }); waiting = 0; } });
    live.on('close', () => { if (waiting) out({ k: 'live', ok: false, conn: live.conn, e: 'closed' }); waiting = 0; });
  }
  if (waiting && Date.now() - waiting > every * 4) { out({ k: 'live', ok: false, conn: live.conn, e: 'TIMEOUT' }); live.destroy(); waiting = 0; return; }
  if (!waiting) { waiting = Date.now(); live.write('ping'); }
}
setInterval(() => { fresh(); ping(); }, every);
`;

export interface TrafficEvent {
  /** Wall-clock ms. */
  t: number;
  k: 'new' | 'live' | 'accepted' | 'listening';
  ok?: boolean;
  answer?: string;
  e?: string;
  conn?: number;
  from?: string;
}

/** Collects a pod program's JSON lines as they arrive. */
export class TrafficLog {
  readonly events: TrafficEvent[] = [];
  #partial = '';

  constructor(
    readonly name: string,
    child: ResultPromise,
  ) {
    child.stdout?.on('data', (d: Buffer) => this.#feed(d.toString()));
  }

  /** Events of kind `k` within [from, to) wall-clock ms. */
  between(k: TrafficEvent['k'], from: number, to = Number.POSITIVE_INFINITY): TrafficEvent[] {
    return this.events.filter((e) => e.k === k && e.t >= from && e.t < to);
  }

  #feed(text: string): void {
    const lines = (this.#partial + text).split('\n');
    this.#partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        this.events.push(JSON.parse(line) as TrafficEvent);
      } catch {
        // A pod program's stray output is not an event.
      }
    }
  }
}

/** ok/failed counts and error codes of a set of events. */
export function tally(events: readonly TrafficEvent[]): { ok: number; failed: number; errors: string[] } {
  const ok = events.filter((e) => e.ok).length;
  const errors = [...new Set(events.filter((e) => !e.ok).map((e) => e.e ?? 'no answer'))];
  return { ok, failed: events.length - ok, errors };
}
