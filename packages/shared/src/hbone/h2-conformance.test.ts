import * as tls from 'node:tls';
import test from 'ava';
import { FRAME, type Frame, frame, goawayCode, headerBlock, RawH2 } from '../testing/raw-h2.js';
import { makePki, type Pki, startEcho, startHbone } from '../testing/transport-fixtures.js';
import { clientTlsOptions } from '../tls/mtls.js';

/**
 * RFC 9113 conformance of the HBONE server, as a table organised like h2spec's case list
 * (h2spec cannot be installed here): each case names its section, the frames a raw client
 * sends after the preface and SETTINGS exchange, and the answer the RFC requires.
 */
const pki: Pki = await makePki();
const echo = await startEcho();
const { server, port } = await startHbone(pki, echo.port);
const rawTls = {
  ...clientTlsOptions(pki.client, pki.bundle, [pki.server.identity]),
  host: '127.0.0.1',
  port,
};
test.after.always(async () => {
  await server.close();
  await echo.close();
});

const E = {
  NO_ERROR: 0,
  PROTOCOL_ERROR: 1,
  FLOW_CONTROL_ERROR: 3,
  STREAM_CLOSED: 5,
  FRAME_SIZE_ERROR: 6,
  REFUSED_STREAM: 7,
  COMPRESSION_ERROR: 9,
} as const;
const CONNECT: [string, string][] = [
  [':method', 'CONNECT'],
  [':authority', '127.0.0.1:9'],
];
const END_STREAM = 0x1;
const END_HEADERS = 0x4;
const ACK = 0x1;

const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};
const settings = (...pairs: [number, number][]) =>
  Buffer.concat(
    pairs.map(([id, v]) => {
      const b = Buffer.alloc(6);
      b.writeUInt16BE(id, 0);
      b.writeUInt32BE(v >>> 0, 2);
      return b;
    }),
  );
const headers = (id: number, flags = END_HEADERS, fields = CONNECT) =>
  frame(FRAME.HEADERS, flags, id, headerBlock(fields));
/** Opens stream `id` and waits for its 200, so later frames meet an open stream. */
async function opened(raw: RawH2, id: number): Promise<void> {
  raw.write(headers(id));
  await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === id);
}

/** h2spec accepts a stream or a connection error for STREAM_CLOSED: `either` does too. */
type Answer =
  | { goaway: number }
  | { rst: [stream: number, code: number] }
  | { either: [stream: number, code: number] }
  | { frame: (f: Frame) => boolean };

interface Case {
  section: string;
  name: string;
  send: (raw: RawH2) => unknown;
  want: Answer;
}

const CASES: Case[] = [
  // §4 framing
  {
    section: '4.2',
    name: 'a DATA frame above our SETTINGS_MAX_FRAME_SIZE',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.DATA, 0, 1, Buffer.alloc(1024 * 1024 + 1)));
    },
    want: { goaway: E.FRAME_SIZE_ERROR },
  },
  {
    section: '4.3',
    name: 'an invalid header block fragment',
    send: (raw) =>
      raw.write(frame(FRAME.HEADERS, END_HEADERS, 1, Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff]))),
    want: { goaway: E.COMPRESSION_ERROR },
  },
  // §5.1 stream states
  {
    section: '5.1 idle',
    name: 'DATA on an idle stream',
    send: (raw) => raw.write(frame(FRAME.DATA, 0, 1, Buffer.from('x'))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '5.1 idle',
    name: 'RST_STREAM on an idle stream',
    send: (raw) => raw.write(frame(FRAME.RST_STREAM, 0, 1, u32(8))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '5.1 idle',
    name: 'WINDOW_UPDATE on an idle stream',
    send: (raw) => raw.write(frame(FRAME.WINDOW_UPDATE, 0, 1, u32(100))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '5.1 idle',
    name: 'CONTINUATION on an idle stream',
    send: (raw) => raw.write(frame(FRAME.CONTINUATION, END_HEADERS, 1, headerBlock(CONNECT))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '5.1 half-closed (remote)',
    name: 'DATA after END_STREAM',
    send: async (raw) => {
      raw.write(headers(1, END_HEADERS | END_STREAM));
      await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === 1);
      raw.write(frame(FRAME.DATA, 0, 1, Buffer.from('x')));
    },
    want: { either: [1, E.STREAM_CLOSED] },
  },
  {
    section: '5.1 closed',
    name: 'HEADERS on a stream closed by END_STREAM both ways',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.DATA, END_STREAM, 1, Buffer.from('x')));
      await raw.waitFor((f) => f.type === FRAME.DATA && f.streamId === 1 && (f.flags & END_STREAM) !== 0);
      await new Promise((resolve) => setTimeout(resolve, 20));
      raw.write(headers(1));
    },
    want: { goaway: E.STREAM_CLOSED },
  },
  {
    section: '5.1 closed',
    name: 'DATA after the client reset the stream',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.RST_STREAM, 0, 1, u32(8)));
      raw.write(frame(FRAME.DATA, 0, 1, Buffer.from('x')));
    },
    want: { goaway: E.STREAM_CLOSED },
  },
  // §5.1.1 stream identifiers
  {
    section: '5.1.1',
    name: 'a client opens an even-numbered stream',
    send: (raw) => raw.write(headers(2)),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '5.1.1',
    name: 'a stream id below one already opened',
    send: async (raw) => {
      await opened(raw, 5);
      raw.write(headers(3));
    },
    want: { goaway: E.PROTOCOL_ERROR },
  },
  // §5.1.2 concurrency
  {
    section: '5.1.2',
    name: 'streams beyond SETTINGS_MAX_CONCURRENT_STREAMS (200)',
    send: (raw) => raw.write(Buffer.concat(Array.from({ length: 201 }, (_, i) => headers(2 * i + 1)))),
    want: { rst: [401, E.REFUSED_STREAM] },
  },
  // §5.5 extensions
  {
    section: '5.5',
    name: 'an unknown frame type is ignored (a PING after it is answered)',
    send: (raw) => {
      raw.write(frame(0xfe, 0, 0, Buffer.from('ignored')));
      raw.write(frame(FRAME.PING, 0, 0, Buffer.from('conform!')));
    },
    want: {
      frame: (f) => f.type === FRAME.PING && (f.flags & ACK) !== 0 && f.payload.toString() === 'conform!',
    },
  },
  // §6 frame definitions
  {
    section: '6.1',
    name: 'DATA on stream 0',
    send: (raw) => raw.write(frame(FRAME.DATA, 0, 0, Buffer.from('x'))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.2',
    name: 'HEADERS on stream 0',
    send: (raw) => raw.write(headers(0)),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.2',
    name: 'HEADERS whose padding exceeds its payload',
    send: (raw) => raw.write(frame(FRAME.HEADERS, END_HEADERS | 0x8, 1, Buffer.from([10, 0, 0]))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.3',
    name: 'PRIORITY on stream 0',
    send: (raw) => raw.write(frame(FRAME.PRIORITY, 0, 0, Buffer.from([0, 0, 0, 1, 16]))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.3',
    name: 'PRIORITY not 5 bytes',
    send: (raw) => raw.write(frame(FRAME.PRIORITY, 0, 1, Buffer.from([0, 0, 0, 1]))),
    want: { rst: [1, E.FRAME_SIZE_ERROR] },
  },
  {
    section: '5.3.1',
    name: 'HEADERS whose PRIORITY depends on its own stream',
    send: (raw) =>
      raw.write(
        frame(
          FRAME.HEADERS,
          END_HEADERS | 0x20,
          1,
          Buffer.concat([u32(1), Buffer.from([16]), headerBlock(CONNECT)]),
        ),
      ),
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '5.3.1',
    name: 'PRIORITY that depends on its own stream',
    send: (raw) => raw.write(frame(FRAME.PRIORITY, 0, 1, Buffer.concat([u32(1), Buffer.from([16])]))),
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '5.3.1',
    name: 'PRIORITY on an open stream that depends on itself',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.PRIORITY, 0, 1, Buffer.concat([u32(1), Buffer.from([16])])));
    },
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '6.4',
    name: 'RST_STREAM on stream 0',
    send: (raw) => raw.write(frame(FRAME.RST_STREAM, 0, 0, u32(8))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.4',
    name: 'RST_STREAM not 4 bytes',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.RST_STREAM, 0, 1, Buffer.from([0, 0, 8])));
    },
    want: { goaway: E.FRAME_SIZE_ERROR },
  },
  {
    section: '6.5',
    name: 'SETTINGS ACK with a payload',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, ACK, 0, settings([4, 100]))),
    want: { goaway: E.FRAME_SIZE_ERROR },
  },
  {
    section: '6.5',
    name: 'SETTINGS on a stream',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 1, Buffer.alloc(0))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.5',
    name: 'SETTINGS not a multiple of 6 bytes',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 0, Buffer.alloc(3))),
    want: { goaway: E.FRAME_SIZE_ERROR },
  },
  {
    section: '6.5.2',
    name: 'SETTINGS_ENABLE_PUSH of 2',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 0, settings([2, 2]))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.5.2',
    name: 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 0, settings([4, 2 ** 31]))),
    want: { goaway: E.FLOW_CONTROL_ERROR },
  },
  {
    section: '6.5.2',
    name: 'SETTINGS_MAX_FRAME_SIZE below 16,384',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 0, settings([5, 16383]))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.5.2',
    name: 'SETTINGS_MAX_FRAME_SIZE above 2^24-1',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 0, settings([5, 2 ** 24]))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.5.2',
    name: 'an unknown setting is ignored and acknowledged',
    send: (raw) => raw.write(frame(FRAME.SETTINGS, 0, 0, settings([0xff, 1]))),
    want: { frame: (f) => f.type === FRAME.SETTINGS && (f.flags & ACK) !== 0 },
  },
  {
    section: '6.7',
    name: 'PING is answered with ACK and the same payload',
    send: (raw) => raw.write(frame(FRAME.PING, 0, 0, Buffer.from('h2spec!!'))),
    want: {
      frame: (f) => f.type === FRAME.PING && (f.flags & ACK) !== 0 && f.payload.toString() === 'h2spec!!',
    },
  },
  {
    section: '6.7',
    name: 'PING on a stream',
    send: (raw) => raw.write(frame(FRAME.PING, 0, 1, Buffer.alloc(8))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.7',
    name: 'PING not 8 bytes',
    send: (raw) => raw.write(frame(FRAME.PING, 0, 0, Buffer.alloc(7))),
    want: { goaway: E.FRAME_SIZE_ERROR },
  },
  {
    section: '6.8',
    name: 'GOAWAY on a stream',
    send: (raw) => raw.write(frame(FRAME.GOAWAY, 0, 1, Buffer.alloc(8))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.9',
    name: 'WINDOW_UPDATE of 0 on the connection',
    send: (raw) => raw.write(frame(FRAME.WINDOW_UPDATE, 0, 0, u32(0))),
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.9',
    name: 'WINDOW_UPDATE of 0 on a stream',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.WINDOW_UPDATE, 0, 1, u32(0)));
    },
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '6.9',
    name: 'WINDOW_UPDATE not 4 bytes',
    send: (raw) => raw.write(frame(FRAME.WINDOW_UPDATE, 0, 0, Buffer.alloc(3))),
    want: { goaway: E.FRAME_SIZE_ERROR },
  },
  {
    section: '6.9.1',
    name: 'the connection window beyond 2^31-1',
    send: (raw) => raw.write(frame(FRAME.WINDOW_UPDATE, 0, 0, u32(2 ** 31 - 1))),
    want: { goaway: E.FLOW_CONTROL_ERROR },
  },
  {
    section: '6.9.1',
    name: 'a stream window beyond 2^31-1',
    send: async (raw) => {
      await opened(raw, 1);
      raw.write(frame(FRAME.WINDOW_UPDATE, 0, 1, u32(2 ** 31 - 1)));
    },
    want: { rst: [1, E.FLOW_CONTROL_ERROR] },
  },
  {
    section: '6.10',
    name: 'CONTINUATION after a HEADERS that ended its block',
    send: (raw) => {
      raw.write(headers(1));
      raw.write(frame(FRAME.CONTINUATION, END_HEADERS, 1, Buffer.alloc(0)));
    },
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.10',
    name: 'a header block interrupted by another frame',
    send: (raw) => {
      raw.write(headers(1, 0));
      raw.write(frame(FRAME.PING, 0, 0, Buffer.alloc(8)));
    },
    want: { goaway: E.PROTOCOL_ERROR },
  },
  {
    section: '6.10',
    name: 'a header block continued on another stream',
    send: (raw) => {
      raw.write(headers(1, 0));
      raw.write(frame(FRAME.CONTINUATION, END_HEADERS, 3, Buffer.alloc(0)));
    },
    want: { goaway: E.PROTOCOL_ERROR },
  },
  // §8 HTTP semantics (a CONNECT server)
  {
    section: '8.2.1',
    name: 'an uppercase header name',
    send: (raw) => raw.write(headers(1, END_HEADERS, [...CONNECT, ['X-Upper', 'a']])),
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '8.3',
    name: 'a request without :method',
    send: (raw) => raw.write(headers(1, END_HEADERS, [[':authority', '127.0.0.1:9']])),
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '8.3',
    name: 'a pseudo-header after a regular header',
    send: (raw) =>
      raw.write(
        headers(1, END_HEADERS, [
          [':method', 'CONNECT'],
          ['x-a', 'b'],
          [':authority', '127.0.0.1:9'],
        ]),
      ),
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
  {
    section: '8.2.2',
    name: 'a connection-specific header',
    send: (raw) => raw.write(headers(1, END_HEADERS, [...CONNECT, ['connection', 'keep-alive']])),
    want: { rst: [1, E.PROTOCOL_ERROR] },
  },
];

function describe(f: Frame | undefined): string {
  if (f === undefined) return 'nothing (connection closed or timed out)';
  if (f.type === FRAME.GOAWAY) return `GOAWAY ${goawayCode(f)} (${f.payload.subarray(8).toString()})`;
  if (f.type === FRAME.RST_STREAM) return `RST_STREAM ${f.payload.readUInt32BE(0)} on ${f.streamId}`;
  return `frame type ${f.type} on ${f.streamId}`;
}

for (const c of CASES) {
  test(`§${c.section}: ${c.name}`, async (t) => {
    const raw = await RawH2.connect(rawTls);
    t.teardown(() => raw.destroy());
    await c.send(raw);
    const want = c.want;
    if ('goaway' in want) {
      const f = await raw.waitFor((f) => f.type === FRAME.GOAWAY || f.type === FRAME.RST_STREAM, 3000);
      t.is(f?.type === FRAME.GOAWAY ? goawayCode(f) : undefined, want.goaway, `got ${describe(f)}`);
      await raw.closed;
    } else if ('rst' in want) {
      const [id, code] = want.rst;
      const f = await raw.waitFor(
        (f) => f.type === FRAME.GOAWAY || (f.type === FRAME.RST_STREAM && f.streamId === id),
        3000,
      );
      t.is(f?.type === FRAME.RST_STREAM ? f.payload.readUInt32BE(0) : undefined, code, `got ${describe(f)}`);
      t.false(raw.destroyed, 'a stream error leaves the connection up');
    } else if ('either' in want) {
      const [id, code] = want.either;
      const f = await raw.waitFor(
        (f) => f.type === FRAME.GOAWAY || (f.type === FRAME.RST_STREAM && f.streamId === id),
        3000,
      );
      const got = f?.type === FRAME.GOAWAY ? goawayCode(f) : f?.payload.readUInt32BE(0);
      t.is(got, code, `got ${describe(f)}`);
    } else {
      t.truthy(await raw.waitFor(want.frame, 3000));
      t.falsy(raw.frames.find((f) => f.type === FRAME.GOAWAY));
    }
  });
}

test('§3.4: a connection whose preface is not HTTP/2 is closed', async (t) => {
  const socket = tls.connect({ ...rawTls, ALPNProtocols: ['h2'] });
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
  const got: Buffer[] = [];
  socket.on('data', (b: Buffer) => got.push(b));
  await new Promise((resolve) => socket.once('close', resolve));
  const all = Buffer.concat(got);
  // SETTINGS first (the server speaks at once), then GOAWAY PROTOCOL_ERROR.
  const goaway = all.indexOf(Buffer.from([0x07, 0x00, 0x00, 0x00, 0x00, 0x00]));
  t.true(goaway > 0, 'a GOAWAY frame header was sent');
});
