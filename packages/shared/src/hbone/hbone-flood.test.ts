import * as http2 from 'node:http2';
import { Duplex, PassThrough } from 'node:stream';
import * as tls from 'node:tls';
import test, { type ExecutionContext } from 'ava';
import { FRAME, frame, goawayCode, headerBlock, RawH2 } from '../testing/raw-h2.js';
import { makePki, metricValue, type Pki, startEcho, startHbone } from '../testing/transport-fixtures.js';
import { clientTlsOptions } from '../tls/mtls.js';

/**
 * HTTP/2 floods against the HBONE server (issue 38): each ends in GOAWAY ENHANCE_YOUR_CALM
 * with bounded memory and no upstream work, counted in zmesh_hbone_floods_total{kind}.
 */
const pki: Pki = await makePki();
const echo = await startEcho();
let dials = 0;
const { server, port, metrics } = await startHbone(pki, echo.port, {
  onTunnel: async () => {
    dials++;
    return { upstream: new PassThrough() };
  },
});
const rawTls = clientTlsOptions(pki.client, pki.bundle, [pki.server.identity]);
const ENHANCE_YOUR_CALM = http2.constants.NGHTTP2_ENHANCE_YOUR_CALM;
const CONNECT: [string, string][] = [
  [':method', 'CONNECT'],
  [':authority', '127.0.0.1:9'],
];

test.after.always(async () => {
  await server.close();
  await echo.close();
});

async function expectFlood(t: ExecutionContext, raw: RawH2, kind: string, code = 'ZM_ERR_HBONE_FLOOD') {
  const goaway = await raw.waitFor((f) => f.type === FRAME.GOAWAY, 5000);
  t.truthy(goaway, 'GOAWAY sent');
  t.is(goaway && goawayCode(goaway), ENHANCE_YOUR_CALM);
  t.is(goaway?.payload.subarray(8).toString(), code);
  await raw.closed;
  t.true((await metricValue(metrics, 'zmesh_hbone_floods_total', { kind })) >= 1, kind);
}

/** Writes `count` copies of `unit` in batches, stopping once the server has closed. */
async function flood(raw: RawH2, unit: Buffer, count: number): Promise<number> {
  const batch = Buffer.concat(Array.from({ length: 1000 }, () => unit));
  let sent = 0;
  while (sent < count && !raw.destroyed) {
    if (!raw.write(batch)) break;
    sent += 1000;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return sent;
}

test.serial('100,000 empty CONTINUATION frames: GOAWAY at the second, memory bounded', async (t) => {
  const rss = process.memoryUsage.rss();
  const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  raw.write(frame(FRAME.HEADERS, 0, 1, headerBlock(CONNECT)));
  await flood(raw, frame(FRAME.CONTINUATION, 0, 1, Buffer.alloc(0)), 100_000);
  await expectFlood(t, raw, 'empty_frames');
  const grew = process.memoryUsage.rss() - rss;
  t.true(grew < 64 * 1024 * 1024, `RSS grew by ${grew} bytes`);
  t.is((await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_FLOOD' })) > 0, true);
});

test.serial('CONTINUATION frames with a byte each: GOAWAY after the per-block frame bound', async (t) => {
  const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  raw.write(frame(FRAME.HEADERS, 0, 1, headerBlock(CONNECT)));
  // A literal name of 1 byte repeated: each frame adds a byte to a never-ending block.
  await flood(raw, frame(FRAME.CONTINUATION, 0, 1, Buffer.from([0x40])), 10_000);
  await expectFlood(t, raw, 'continuation');
});

test.serial('2,000 rapid resets with NO_ERROR: GOAWAY, no upstream dials', async (t) => {
  const before = dials;
  const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  const parts: Buffer[] = [];
  const rst = Buffer.alloc(4); // NO_ERROR: counted like any other code
  for (let i = 0; i < 2000; i++) {
    const id = 2 * i + 1;
    parts.push(frame(FRAME.HEADERS, 0x4, id, headerBlock(CONNECT)), frame(FRAME.RST_STREAM, 0, id, rst));
  }
  raw.write(Buffer.concat(parts));
  await expectFlood(t, raw, 'rst_stream', 'ZM_ERR_HBONE_RAPID_RESET');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.log(`${dials - before} upstream dials for 2,000 reset streams`);
  t.true(dials - before <= 4, `${dials - before} upstream dials`);
  t.is(await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_RAPID_RESET' }), 1);
});

test.serial(
  'resets of streams that were answered or completed are no flood: 600 of them keep the session (issue 38)',
  async (t) => {
    // Envoy counts only premature resets (before the response, in the stream's first second):
    // a source whose apps abort connections that had finished must not lose its session.
    const code = { code: 'ZM_ERR_HBONE_RAPID_RESET' };
    const before = await metricValue(metrics, 'zmesh_errors_total', code);
    const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
    const rst = Buffer.alloc(4); // NO_ERROR, as an app's abort of a finished connection sends
    const END_STREAM = 0x1;
    let next = 1;
    const unanswered: number[] = [];
    for (let batch = 0; batch < 6; batch++) {
      const ids = Array.from({ length: 100 }, (_, i) => next + 2 * i);
      next += 200;
      raw.write(Buffer.concat(ids.map((id) => frame(FRAME.HEADERS, 0x4, id, headerBlock(CONNECT)))));
      for (const id of ids)
        if (!(await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === id, 5000)))
          unanswered.push(id);
      if (batch % 2 === 1) {
        // Completed both ways first: END_STREAM from us, the tunnel's end from the server.
        raw.write(Buffer.concat(ids.map((id) => frame(FRAME.DATA, END_STREAM, id, Buffer.alloc(0)))));
        for (const id of ids)
          await raw.waitFor((f) => f.streamId === id && (f.flags & END_STREAM) !== 0, 5000);
      }
      raw.write(Buffer.concat(ids.map((id) => frame(FRAME.RST_STREAM, 0, id, rst))));
    }
    t.deepEqual(unanswered, [], 'every stream answered before its reset');
    raw.write(frame(FRAME.HEADERS, 0x4, next, headerBlock(CONNECT)));
    t.truthy(
      await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === next, 5000),
      'the session still takes streams',
    );
    t.is(
      raw.frames.find((f) => f.type === FRAME.GOAWAY),
      undefined,
      'no GOAWAY',
    );
    t.is(await metricValue(metrics, 'zmesh_errors_total', code), before);
    raw.destroy();
    await raw.closed;
  },
);

test.serial(
  'premature resets are also bounded as a share of the session, as Envoy does: GOAWAY under the per-second rate',
  async (t) => {
    // The ratio alone, on a server whose per-second bound is out of reach: 250 premature
    // resets before 500 streams have ended is half of Envoy's 500.
    const slow = await startHbone(pki, echo.port, {
      rapidReset: { limit: 1_000_000, windowMs: 1000 },
      onTunnel: async () => ({ upstream: new PassThrough() }),
    });
    t.teardown(() => slow.server.close());
    const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port: slow.port });
    const rst = Buffer.alloc(4);
    let sent = 0;
    for (let id = 1; sent < 400 && !raw.destroyed; id += 2, sent++)
      raw.write(
        Buffer.concat([
          frame(FRAME.HEADERS, 0x4, id, headerBlock(CONNECT)),
          frame(FRAME.RST_STREAM, 0, id, rst),
        ]),
      );
    const goaway = await raw.waitFor((f) => f.type === FRAME.GOAWAY, 5000);
    t.truthy(goaway, 'GOAWAY sent');
    t.is(goaway && goawayCode(goaway), ENHANCE_YOUR_CALM);
    t.is(goaway?.payload.subarray(8).toString(), 'ZM_ERR_HBONE_RAPID_RESET');
    await raw.closed;
  },
);

test.serial('a PRIORITY flood and an unknown-frame flood end with GOAWAY', async (t) => {
  const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  await flood(raw, frame(FRAME.PRIORITY, 0, 1, Buffer.from([0, 0, 0, 0, 16])), 10_000);
  await expectFlood(t, raw, 'priority');
  const raw2 = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  await flood(raw2, frame(0x42, 0, 0, Buffer.alloc(0)), 10_000);
  await expectFlood(t, raw2, 'priority');
});

test.serial(
  'a WINDOW_UPDATE flood ends with GOAWAY; the budget grows with the DATA frames we send',
  async (t) => {
    const increment = Buffer.from([0, 0, 0, 1]);
    const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
    await flood(raw, frame(FRAME.WINDOW_UPDATE, 0, 0, increment), 10_000);
    await expectFlood(t, raw, 'window_update');

    // A tunnel that received data may be sent up to 10 WINDOW_UPDATEs per DATA frame.
    const ok = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
    ok.headers(1, CONNECT);
    await ok.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === 1);
    ok.write(frame(FRAME.DATA, 0, 1, Buffer.from('ping')));
    await ok.waitFor((f) => f.type === FRAME.DATA && f.streamId === 1);
    ok.write(Buffer.concat(Array.from({ length: 14 }, () => frame(FRAME.WINDOW_UPDATE, 0, 1, increment))));
    ok.write(frame(FRAME.DATA, 0, 1, Buffer.from('pong')));
    await ok.waitFor((f) => f.type === FRAME.DATA && f.streamId === 1 && f.payload.toString() === 'pong');
    t.pass();
  },
);

test.serial('empty DATA frames on an open stream end the connection', async (t) => {
  const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  raw.headers(1, CONNECT);
  await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === 1);
  await flood(raw, frame(FRAME.DATA, 0, 1, Buffer.alloc(0)), 10_000);
  await expectFlood(t, raw, 'empty_frames');
});

test.serial('normal tunnels with an empty write in between are no flood', async (t) => {
  const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
  raw.headers(1, CONNECT);
  t.truthy(await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === 1));
  raw.write(frame(FRAME.DATA, 0, 1, Buffer.alloc(0)));
  raw.write(frame(FRAME.DATA, 0, 1, Buffer.from('x')));
  raw.write(frame(FRAME.DATA, 0, 1, Buffer.alloc(0)));
  raw.write(frame(FRAME.DATA, 0x1, 1, Buffer.alloc(0)));
  const echoed = await raw.waitFor((f) => f.type === FRAME.DATA && f.streamId === 1 && f.payload.length > 0);
  t.is(echoed?.payload.toString(), 'x');
  t.falsy(raw.frames.find((f) => f.type === FRAME.GOAWAY));
  raw.destroy();
  await raw.closed;
});

test.serial(
  'a client that never reads: what the server holds stays bounded, the PING deadline closes it (counted)',
  async (t) => {
    // An upstream that talks without end, counting what it was asked for.
    let produced = 0;
    const chunk = Buffer.alloc(64 * 1024, 7);
    const talker = await startHbone(pki, echo.port, {
      keepalive: { intervalMs: 200, timeoutMs: 600 },
      onTunnel: async () => ({
        upstream: new Duplex({
          read() {
            produced += chunk.length;
            this.push(chunk);
          },
          write(_c, _e, cb) {
            cb();
          },
        }),
      }),
    });
    t.teardown(() => talker.server.close());
    const socket = tls.connect({ ...rawTls, host: '127.0.0.1', port: talker.port });
    socket.on('error', () => {});
    await new Promise((resolve) => socket.once('secureConnect', resolve));
    // Windows as large as HTTP/2 allows, so only the server's own bounds hold it back; then
    // not one byte read: no PING ACK ever comes back.
    const settings = Buffer.alloc(6);
    settings.writeUInt16BE(0x4, 0);
    settings.writeUInt32BE(2 ** 31 - 1, 2);
    const increment = Buffer.alloc(4);
    increment.writeUInt32BE(2 ** 31 - 1 - 65_535);
    socket.write(
      Buffer.concat([
        Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
        frame(FRAME.SETTINGS, 0, 0, settings),
        frame(FRAME.WINDOW_UPDATE, 0, 0, increment),
        frame(FRAME.HEADERS, 0x4, 1, headerBlock(CONNECT)),
      ]),
    );
    socket.pause();
    const until = async (cond: () => boolean) => {
      for (const deadline = Date.now() + 5000; !cond() && Date.now() < deadline; )
        await new Promise((r) => setTimeout(r, 50));
    };
    await until(() => produced > 0);
    t.true(produced > 0, 'the tunnel was opened');
    await until(() => talker.server.connectionCount() === 0);
    t.log(`upstream asked for ${(produced / 2 ** 20).toFixed(1)} MiB before the session closed`);
    t.is(talker.server.connectionCount(), 0, 'the session is closed by the PING deadline');
    t.true(produced < 16 * 2 ** 20, `${produced} bytes taken from the upstream`);
    t.is(
      await metricValue(talker.metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_SESSION' }),
      1,
      'the closure is counted',
    );
    socket.destroy();
  },
);
