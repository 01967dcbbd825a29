import { connect } from 'node:net';
import { type Mesh, startMesh, waitFor } from '@zmesh/harness';
import {
  AccessLog,
  type AccessLogPolicy,
  MeshMetrics,
  parseAccessLogMode,
  parseNamespaceModes,
} from '@zmesh/shared';
import test from 'ava';
import { startEcho } from './helpers/probes.js';

/** Lines a ztunnel's access log wrote, as the objects it passed to its sink. */
function sink() {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, info: (obj: Record<string, unknown>) => void lines.push(obj) };
}

const policy = (over: Partial<AccessLogPolicy> = {}): AccessLogPolicy => ({
  mode: { kind: 'on' },
  namespaces: new Map(),
  ratePerSecond: 100,
  burst: 200,
  ...over,
});

const record = {
  direction: 'outbound' as const,
  src: { identity: 'spiffe://cluster.local/ns/a/sa/x' },
  dst: { address: '10.0.0.1:80' },
  bytesSent: 1,
  bytesReceived: 2,
  durationMs: 3,
  result: 'ok' as const,
  flag: '-',
};

test('modes parse as off, on or sample:F, and per namespace; anything else is refused with what is wanted', (t) => {
  t.deepEqual(parseAccessLogMode('on'), { ok: true, value: { kind: 'on' } });
  t.deepEqual(parseAccessLogMode('sample:0.25'), { ok: true, value: { kind: 'sample', fraction: 0.25 } });
  for (const bad of ['yes', 'sample:0', 'sample:1.5', 'sample:', ''])
    t.false(parseAccessLogMode(bad).ok, bad);
  const ns = parseNamespaceModes('shop=off,front=sample:0.1');
  t.true(ns.ok);
  if (ns.ok) t.deepEqual([...ns.value.keys()], ['shop', 'front']);
  t.false(parseNamespaceModes('Shop=on').ok);
  t.false(parseNamespaceModes('shop').ok);
});

test('a storm of connections stays under the line budget: the rest is counted as dropped', async (t) => {
  let now = 0;
  const s = sink();
  const { registry } = new MeshMetrics();
  const log = new AccessLog({
    policy: policy({ ratePerSecond: 50, burst: 100 }),
    sink: s,
    registry,
    now: () => now,
  });
  for (let second = 0; second < 10; second++) {
    for (let i = 0; i < 5000; i++) log.record('a', record);
    now += 1000;
  }
  // 100 at once, then 50 a second: 100 + 9 × 50.
  t.is(s.lines.length, 100 + 9 * 50);
  const text = await registry.metrics();
  t.regex(text, /zmesh_access_log_lines_total\{result="written"\} 550/);
  t.regex(text, /zmesh_access_log_lines_total\{result="dropped"\} 49450/);
});

test('per-namespace modes: off writes nothing, sample keeps its fraction', (t) => {
  const s = sink();
  let r = 0;
  const seq = [0.05, 0.5, 0.09, 0.95];
  const log = new AccessLog({
    policy: policy({
      namespaces: new Map([
        ['quiet', { kind: 'off' }],
        ['some', { kind: 'sample', fraction: 0.1 }],
      ]),
    }),
    sink: s,
    random: () => seq[r++ % seq.length]!,
  });
  log.record('quiet', record);
  for (let i = 0; i < 4; i++) log.record('some', record);
  log.record('other', record);
  t.is(s.lines.length, 3, 'two sampled in of four, and the default namespace');
});

let mesh: Mesh;
const a = sink();
const b = sink();
let closeEcho: () => void;

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: 24,
    forwards: [
      { port: 18000, to: '127.24.2.1:7000' },
      { port: 18001, to: '127.24.96.10:80' },
      { port: 18002, to: '127.24.2.1:7999' },
    ],
    ztunnel: (node) => ({ accessLogSink: node === 'node-a' ? a : b }),
  });
  const echo = await startEcho(mesh.ip.server, 7000);
  closeEcho = () => {
    for (const s of echo.sockets) s.destroy();
    echo.close();
  };
});

test.after.always(async () => {
  closeEcho?.();
  await mesh?.stop();
});

function echoOnce(port: number, payload: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: mesh.ip.client, port });
    let got = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      got += d;
      if (got.length >= payload.length) s.end();
    });
    s.on('close', () => resolve(got));
    s.on('error', reject);
    s.on('connect', () => s.write(payload));
  });
}

test.serial('one line per closed connection on each side, checked field by field', async (t) => {
  t.is(await echoOnce(18001, 'hello access log'), 'hello access log');
  await waitFor(() => a.lines.length >= 1 && b.lines.length >= 1, 5000);
  const out = a.lines.at(-1)!;
  t.like(out, {
    direction: 'outbound',
    src_identity: 'spiffe://cluster.local/ns/team-a/sa/client',
    src_workload: 'client',
    src_namespace: 'team-a',
    dst_address: '127.24.96.10:80',
    dst_identity: 'spiffe://cluster.local/ns/team-b/sa/server',
    dst_namespace: 'team-b',
    via: 'hbone',
    bytes_sent: 16,
    bytes_received: 16,
    result: 'ok',
    response_flags: '-',
  });
  t.is(typeof out.duration_ms, 'number');
  t.regex(String(out.dst_service), /^server\./);
  const inn = b.lines.at(-1)!;
  t.like(inn, {
    direction: 'inbound',
    src_identity: 'spiffe://cluster.local/ns/team-a/sa/client',
    dst_identity: 'spiffe://cluster.local/ns/team-b/sa/server',
    dst_address: '127.24.2.1:7000',
    via: 'hbone',
    result: 'ok',
  });
});

test.serial('a refused connection is a line with its result, flag and error code', async (t) => {
  const before = a.lines.length + b.lines.length;
  await echoOnce(18002, 'x').catch(() => '');
  await waitFor(() => a.lines.length + b.lines.length > before, 5000);
  const refused = [...a.lines, ...b.lines].slice(-2).find((l) => l.result !== 'ok');
  t.truthy(refused, JSON.stringify([...a.lines, ...b.lines].slice(-2)));
  t.is(typeof refused?.error_code, 'string');
  t.regex(String(refused?.error_code), /^ZM_ERR_/);
  t.not(refused?.response_flags, '-');
});
