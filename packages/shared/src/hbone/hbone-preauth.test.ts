import * as net from 'node:net';
import * as tls from 'node:tls';
import test from 'ava';
import {
  makePki,
  metricValue,
  openFds,
  type Pki,
  settleFds,
  startEcho,
  startHbone,
} from '../testing/transport-fixtures.js';
import { clientTlsOptions } from '../tls/mtls.js';
import { PreauthLimiter } from './admission.js';
import { connectHbone } from './hbone-client.js';

/**
 * Connections before authentication are owned from accept to close (issue 38): a deadline
 * over TLS + preface + first SETTINGS, and bounds per source and in total. Serial: fd counts
 * are process-wide.
 */
const pki: Pki = await makePki();
const echo = await startEcho();
test.after.always(() => echo.close());

function idle(port: number, host = '127.0.0.1', localAddress?: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port, ...(localAddress ? { localAddress } : {}) });
    s.on('error', () => {});
    s.resume();
    s.once('connect', () => resolve(s)).once('error', reject);
  });
}

/** Polls until `read` returns `want` (the server sees a close a moment after the client). */
async function eventually(read: () => Promise<number> | number, want: number, ms = 1000): Promise<number> {
  const deadline = Date.now() + ms;
  let v = await read();
  while (v !== want && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    v = await read();
  }
  return v;
}

function closed(s: net.Socket): Promise<void> {
  return new Promise((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve())));
}

async function tunnelWorks(port: number): Promise<boolean> {
  const session = await connectHbone({
    host: '127.0.0.1',
    port,
    credential: pki.client,
    bundle: pki.bundle,
    expectedIdentities: [pki.server.identity],
    timeoutMs: 2000,
  });
  try {
    const tunnel = await session.openTunnel({ authority: '127.0.0.1:9' });
    const back = new Promise<string>((resolve) => tunnel.once('data', (b: Buffer) => resolve(b.toString())));
    tunnel.write('ping');
    const ok = (await back) === 'ping';
    tunnel.end();
    return ok;
  } finally {
    session.destroy();
  }
}

test.serial('a plain TCP connection that never starts TLS is closed at the deadline', async (t) => {
  const { server, port, metrics } = await startHbone(pki, echo.port, { handshakeTimeoutMs: 300 });
  t.teardown(() => server.close());
  const before = openFds();
  const sockets = await Promise.all(Array.from({ length: 20 }, () => idle(port)));
  const started = Date.now();
  await Promise.all(sockets.map(closed));
  const took = Date.now() - started;
  t.true(took >= 200 && took < 2000, `closed after ${took} ms`);
  t.is(
    await metricValue(metrics, 'zmesh_hbone_refused_connections_total', { reason: 'handshake_timeout' }),
    20,
  );
  t.is(await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_HANDSHAKE_TIMEOUT' }), 20);
  t.is(await eventually(() => metricValue(metrics, 'zmesh_hbone_preauth_connections'), 0), 0);
  t.true((await settleFds(before)) <= before);
});

test.serial('the deadline covers the HTTP/2 preface: TLS done, no preface, closed', async (t) => {
  const { server, port, metrics } = await startHbone(pki, echo.port, { handshakeTimeoutMs: 300 });
  t.teardown(() => server.close());
  const opts = clientTlsOptions(pki.client, pki.bundle, [pki.server.identity]);
  const socket = tls.connect({ ...opts, host: '127.0.0.1', port, ALPNProtocols: ['h2'] });
  socket.on('error', () => {});
  socket.resume(); // a paused socket never reads the server's close
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  const started = Date.now();
  await closed(socket);
  t.true(Date.now() - started < 2000);
  t.is(
    await metricValue(metrics, 'zmesh_hbone_refused_connections_total', { reason: 'handshake_timeout' }),
    1,
  );
  // A session that did send its preface in time is not cut by the deadline.
  t.true(await tunnelWorks(port));
  await new Promise((resolve) => setTimeout(resolve, 400));
  t.true(await tunnelWorks(port));
});

test.serial(
  'one source holds at most perSource unauthenticated connections; others still get in',
  async (t) => {
    const preauth = new PreauthLimiter({ perSource: 8, total: 100 });
    const { server, port, metrics } = await startHbone(pki, echo.port, { preauth, handshakeTimeoutMs: 5000 });
    t.teardown(() => server.close());
    const held = await Promise.all(Array.from({ length: 8 }, () => idle(port, '127.0.0.1', '127.0.0.2')));
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.is(preauth.pending, 8);
    const extra = await idle(port, '127.0.0.1', '127.0.0.2');
    await closed(extra); // refused at once, long before the 5 s deadline
    t.is(
      await metricValue(metrics, 'zmesh_hbone_refused_connections_total', { reason: 'preauth_source' }),
      1,
    );
    t.is(await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_PREAUTH_LIMIT' }), 1);
    t.true(await tunnelWorks(port), 'another source authenticates');
    for (const s of held) s.destroy();
    await Promise.all(held.map(closed));
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.is(preauth.pending, 0, 'closing releases the slots');
    t.is(await metricValue(metrics, 'zmesh_hbone_preauth_connections'), 0);
  },
);

test.serial('the total bound is shared by every listener given the same limiter', async (t) => {
  const preauth = new PreauthLimiter({ perSource: 100, total: 10 });
  const a = await startHbone(pki, echo.port, { preauth, handshakeTimeoutMs: 5000 });
  const b = await startHbone(pki, echo.port, { preauth, handshakeTimeoutMs: 5000 });
  t.teardown(async () => {
    await a.server.close();
    await b.server.close();
  });
  const held = [
    ...(await Promise.all(Array.from({ length: 5 }, () => idle(a.port)))),
    ...(await Promise.all(Array.from({ length: 5 }, () => idle(b.port)))),
  ];
  t.is(await eventually(() => preauth.pending, 10), 10);
  const extra = await idle(b.port, '127.0.0.1', '127.0.0.3');
  await closed(extra);
  t.is(await metricValue(b.metrics, 'zmesh_hbone_refused_connections_total', { reason: 'preauth_total' }), 1);
  for (const s of held) s.destroy();
  await Promise.all(held.map(closed));
  t.is(await eventually(() => preauth.pending, 0), 0);
  t.true(await tunnelWorks(a.port));
});

test('PreauthLimiter releases once per ticket and forgets sources at zero', (t) => {
  const l = new PreauthLimiter({ perSource: 2, total: 3 });
  const a = l.admit('a');
  const b = l.admit('a');
  t.true(a.ok && b.ok);
  const c = l.admit('a');
  t.false(c.ok);
  if (!c.ok) t.is(c.error.code, 'ZM_ERR_HBONE_PREAUTH_LIMIT');
  t.true(l.admit('b').ok);
  const d = l.admit('c');
  t.false(d.ok);
  if (!d.ok) t.regex(d.error.message, /total limit 3/);
  if (a.ok) {
    a.value.release();
    a.value.release();
  }
  t.is(l.pending, 2);
  t.is(l.pendingFrom('a'), 1);
  if (b.ok) b.value.release();
  t.is(l.pendingFrom('a'), 0);
});

test('PreauthLimiter with a shared count: the total is over every limiter that shares it', (t) => {
  let n = 0;
  const shared = {
    load: () => n,
    tryAdd: (k: number, limit: number) => {
      if (n + k > limit) return false;
      n += k;
      return true;
    },
    add: (k: number) => {
      n += k;
    },
    sub: (k: number) => {
      n -= k;
    },
  };
  const [one, two] = [
    new PreauthLimiter({ total: 3, perSource: 1, shared }),
    new PreauthLimiter({ total: 3, shared }),
  ];
  const held = [one.admit('a'), two.admit('b'), two.admit('c')];
  t.true(held.every((r) => r.ok));
  const over = one.admit('d');
  t.false(over.ok, 'the fourth, on the first limiter, is over the shared 3');
  if (!over.ok) t.regex(over.error.message, /total limit 3/);
  if (held[1]!.ok) held[1]!.value.release();
  t.false(one.admit('a').ok, 'a source over its own bound gives back the total it took');
  t.is(n, 2);
  t.true(one.admit('d').ok);
  t.is(n, 3);
});
