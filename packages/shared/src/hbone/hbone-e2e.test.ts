import { createHash, randomBytes } from 'node:crypto';
import * as net from 'node:net';
import { Duplex } from 'node:stream';
import test from 'ava';
import { isZmeshError, ZmeshError } from '../errors/index.js';
import { PUMP_QUEUE_BYTES } from '../net/byte-pump.js';
import { makePki, metricValue, type Pki, startEcho, startHbone } from '../testing/transport-fixtures.js';
import { connectHbone } from './hbone-client.js';
import type { HboneSession } from './hbone-session.js';
import { SESSION_STREAM_WINDOWS_BYTES, STREAM_WINDOW_BYTES } from './hbone-settings.js';
import { streamWindowFor } from './stream-windows.js';

const TRAILER = Buffer.from('<server rest after client END_STREAM>');
const pki: Pki = await makePki();
const echo = await startEcho(TRAILER);
const { server, port, metrics } = await startHbone(pki, echo.port);
const payload = randomBytes(16 * 1024 * 1024);

test.after.always(async () => {
  await server.close();
  await echo.close();
});

function connect(extra: Partial<Parameters<typeof connectHbone>[0]> = {}): Promise<HboneSession> {
  return connectHbone({
    host: '127.0.0.1',
    port,
    credential: pki.client,
    bundle: pki.bundle,
    expectedIdentities: [pki.server.identity],
    ...extra,
  });
}

function readAll(stream: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.once('end', () => resolve(Buffer.concat(chunks)));
    stream.once('error', reject);
  });
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

for (const [label, size] of [
  ['1 B', 1],
  ['64 KiB', 64 * 1024],
  ['1 MiB', 1024 * 1024],
  ['16 MiB', 16 * 1024 * 1024],
] as const) {
  test(`${label} arrives byte-exact both ways, and data still flows after the client half-closes`, async (t) => {
    const session = await connect();
    t.is(session.peerIdentity, pki.server.identity);
    const tunnel = await session.openTunnel({ authority: `127.0.0.1:${echo.port}` });
    const received = readAll(tunnel);
    tunnel.end(payload.subarray(0, size));
    const got = await received;
    t.is(got.length, size + TRAILER.length);
    t.is(sha(got.subarray(0, size)), sha(payload.subarray(0, size)));
    t.deepEqual(got.subarray(size), TRAILER);
    session.close();
  });
}

test('many tunnels share one session; idle fires when the last one ends', async (t) => {
  const session = await connect();
  const idle = new Promise<void>((resolve) => session.once('idle', resolve));
  const results = await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      const tunnel = await session.openTunnel({
        authority: `127.0.0.1:${echo.port}`,
        forwardedFor: `10.0.0.${i}:1`,
      });
      const received = readAll(tunnel);
      tunnel.end(Buffer.from(`tunnel ${i}`));
      return (await received).toString();
    }),
  );
  results.forEach((r, i) => {
    t.is(r, `tunnel ${i}${TRAILER}`);
  });
  await idle;
  t.is(session.activeStreams, 0);
  session.close();
});

test('onTunnel refusals answer with their status and code, and are counted', async (t) => {
  const refusing = await startHbone(pki, echo.port, {
    onTunnel: async ({ request }) => {
      if (request.authority.port === 1) throw new ZmeshError('ZM_ERR_AUTHZ_DENIED', { policy: 'ns/deny' });
      throw new ZmeshError('ZM_ERR_HBONE_UPSTREAM_CONNECT', { target: 'x', reason: 'refused' });
    },
  });
  const session = await connect({ port: refusing.port });
  for (const [authority, status, code] of [
    ['10.0.0.1:1', 401, 'ZM_ERR_AUTHZ_DENIED'],
    ['10.0.0.1:2', 503, 'ZM_ERR_HBONE_UPSTREAM_CONNECT'],
  ] as const) {
    const e = await t.throwsAsync(session.openTunnel({ authority }));
    t.true(isZmeshError(e, 'ZM_ERR_HBONE_TUNNEL_REFUSED'));
    t.like((e as ZmeshError).context, { status, code });
  }
  t.is(
    await metricValue(refusing.metrics, 'zmesh_errors_total', { code: 'ZM_ERR_AUTHZ_DENIED', flag: 'UAEX' }),
    1,
  );
  t.false(session.closed, 'a refused tunnel leaves the session up');
  session.close();
  await refusing.server.close();
});

test('a burst of refusals does not look like rapid reset: refused tunnels end without RST', async (t) => {
  const session = await connect();
  for (let batch = 0; batch < 3; batch++) {
    const results = await Promise.allSettled(
      Array.from({ length: 60 }, () => session.openTunnel({ authority: 'not-an-ip:80' })),
    );
    const bad = results.find(
      (r) => !(r.status === 'rejected' && isZmeshError(r.reason, 'ZM_ERR_HBONE_TUNNEL_REFUSED')),
    );
    t.is(bad, undefined, String((bad as PromiseRejectedResult)?.reason));
  }
  t.false(session.closed || session.draining);
  t.is(await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_RAPID_RESET' }), 0);
  session.close();
});

test('gauges count sessions and streams', async (t) => {
  const session = await connect();
  const tunnel = await session.openTunnel({ authority: `127.0.0.1:${echo.port}` });
  t.true((await metricValue(metrics, 'zmesh_hbone_inbound_streams')) >= 1);
  t.true((await metricValue(metrics, 'zmesh_hbone_inbound_sessions')) >= 1);
  const done = readAll(tunnel);
  tunnel.end();
  await done;
  session.close();
});

test('drain sends GOAWAY, lets the open tunnel finish, then closes', async (t) => {
  const draining = await startHbone(pki, echo.port);
  const session = await connect({ port: draining.port });
  const tunnel = await session.openTunnel({ authority: `127.0.0.1:${echo.port}` });
  const goaway = new Promise<void>((resolve) => session.once('goaway', () => resolve()));
  const drained = draining.server.drain(5000);
  await goaway;
  t.true(session.draining);
  t.false(session.hasCapacity);
  const refused = await t.throwsAsync(session.openTunnel({ authority: `127.0.0.1:${echo.port}` }));
  t.true(isZmeshError(refused, 'ZM_ERR_HBONE_SESSION'));
  const received = readAll(tunnel);
  tunnel.end(Buffer.from('last words'));
  t.is((await received).toString(), `last words${TRAILER}`);
  await drained;
  t.is(draining.server.connectionCount(), 0);
});

test('close() does not wait for a client stuck before its TLS handshake', async (t) => {
  const s = await startHbone(pki, echo.port);
  const idle = net.connect({ host: '127.0.0.1', port: s.port });
  idle.on('error', () => {});
  await new Promise((resolve) => idle.once('connect', resolve));
  const start = Date.now();
  await s.server.close();
  t.true(Date.now() - start < 1000, `close took ${Date.now() - start} ms`);
  idle.destroy();
});

test('a peer that stops answering PINGs is closed by the keepalive', async (t) => {
  // A relay that can be frozen: bytes stop flowing both ways without FIN or RST.
  let frozen = false;
  const relay = net.createServer((inbound) => {
    const outbound = net.connect({ host: '127.0.0.1', port });
    for (const [from, to] of [
      [inbound, outbound],
      [outbound, inbound],
    ] as const) {
      from.on('data', (c) => {
        if (!frozen) to.write(c);
      });
      from.on('error', () => to.destroy());
      from.on('close', () => to.destroy());
    }
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  const session = await connect({
    port: (relay.address() as net.AddressInfo).port,
    keepalive: { intervalMs: 50, timeoutMs: 200 },
  });
  const closed = new Promise<void>((resolve) => session.once('close', resolve));
  frozen = true;
  const start = Date.now();
  await closed;
  t.true(Date.now() - start < 2000);
  t.true(session.closed);
  relay.close();
});

test('connectHbone honours an abort signal and a timeout', async (t) => {
  const silent = net.createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const silentPort = (silent.address() as net.AddressInfo).port;
  const timedOut = await t.throwsAsync(connect({ port: silentPort, timeoutMs: 100 }));
  t.true(isZmeshError(timedOut, 'ZM_ERR_HBONE_SESSION'));
  t.regex(timedOut!.message, /timeout/);
  const controller = new AbortController();
  const aborted = t.throwsAsync(connect({ port: silentPort, signal: controller.signal }));
  controller.abort();
  t.regex((await aborted)!.message, /aborted/);
  silent.close();
});

/** Writes to `tunnel` until it stops draining for 300 ms; returns the bytes it accepted. */
async function fillUntilStalled(tunnel: Duplex, limit = 64 * 1024 * 1024): Promise<number> {
  const chunk = Buffer.alloc(64 * 1024);
  let written = 0;
  while (written < limit) {
    written += chunk.length;
    if (tunnel.write(chunk)) continue;
    const drained = await Promise.race([
      new Promise<boolean>((resolve) => tunnel.once('drain', () => resolve(true))),
      new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 300)),
    ]);
    if (!drained) break;
  }
  return written;
}

test('a slow reader holds the sender to the stream window instead of buffering without bound', async (t) => {
  // An upstream that accepts nothing: its writable side never calls back.
  const stuck = new Duplex({ read() {}, write(_chunk, _enc, _cb) {} });
  const slow = await startHbone(pki, echo.port, { onTunnel: async () => ({ upstream: stuck }) });
  const session = await connect({ port: slow.port });
  const tunnel = await session.openTunnel({ authority: '127.0.0.1:9' });
  const written = await fillUntilStalled(tunnel);
  t.log(`sender stalled after ${written} bytes`);
  t.true(written <= STREAM_WINDOW_BYTES + 2 * 1024 * 1024, `${written} bytes accepted`);
  t.true(written >= 1024 * 1024, 'the window itself was usable');
  session.destroy();
  stuck.destroy();
  await slow.server.close();
});

test('32 stalled tunnels on one session share its window budget instead of 32 full windows', async (t) => {
  const stuck: Duplex[] = [];
  const slow = await startHbone(pki, echo.port, {
    onTunnel: async () => {
      const upstream = new Duplex({ read() {}, write(_chunk, _enc, _cb) {} });
      stuck.push(upstream);
      return { upstream };
    },
  });
  const session = await connect({ port: slow.port });
  const tunnels = await Promise.all(
    Array.from({ length: 32 }, () => session.openTunnel({ authority: '127.0.0.1:9' })),
  );
  const written = (await Promise.all(tunnels.map((tunnel) => fillUntilStalled(tunnel)))).reduce(
    (a, b) => a + b,
  );
  t.log(`32 tunnels stalled after ${(written / 1048576).toFixed(1)} MiB in all`);
  // Each stream's window is 512 KiB at 32 streams. Beside it, each tunnel holds its queue
  // toward the stuck upstream and the sender's last chunk. With a fixed 4 MiB per stream,
  // the same tunnels took 138 MiB.
  const perTunnel = PUMP_QUEUE_BYTES + 64 * 1024;
  t.true(written <= SESSION_STREAM_WINDOWS_BYTES + 32 * perTunnel, `${written} bytes accepted`);
  // destroy() sends RST_STREAM(NO_ERROR): the server must still let go of the stream and
  // its stuck upstream. With the streams gone, a lone tunnel gets the full window back.
  for (const tunnel of tunnels) tunnel.destroy();
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.true(
    stuck.every((s) => s.destroyed),
    `${stuck.filter((s) => !s.destroyed).length} upstreams still held`,
  );
  const lone = await session.openTunnel({ authority: '127.0.0.1:9' });
  const loneBytes = await fillUntilStalled(lone);
  t.true(loneBytes >= STREAM_WINDOW_BYTES - 64 * 1024, `the full window is back (${loneBytes})`);
  session.destroy();
  for (const s of stuck) s.destroy();
  await slow.server.close();
});

test('the stream window halves as streams double and never leaves its bounds', (t) => {
  const MiB = 1024 * 1024;
  t.is(streamWindowFor(0), STREAM_WINDOW_BYTES);
  t.is(streamWindowFor(4), 4 * MiB);
  t.is(streamWindowFor(5), 2 * MiB);
  t.is(streamWindowFor(32), 512 * 1024);
  t.is(streamWindowFor(64), 256 * 1024);
  t.is(streamWindowFor(100), 128 * 1024);
  t.is(streamWindowFor(10_000), 64 * 1024);
});

test('a session never exceeds its stream bound', async (t) => {
  const session = await connect({ maxStreams: 2 });
  const a = await session.openTunnel({ authority: '127.0.0.1:9' });
  const b = await session.openTunnel({ authority: '127.0.0.1:9' });
  t.false(session.hasCapacity);
  const e = await t.throwsAsync(session.openTunnel({ authority: '127.0.0.1:9' }));
  t.regex(e!.message, /stream limit 2/);
  a.destroy();
  b.destroy();
  session.destroy();
});
