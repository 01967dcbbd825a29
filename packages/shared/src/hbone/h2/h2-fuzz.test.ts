import { Duplex } from 'node:stream';
import test from 'ava';
import fc from 'fast-check';
import { FRAME, frame, headerBlock } from '../../testing/raw-h2.js';
import {
  parseBaggage,
  parseConnectAuthority,
  parseForwardedFor,
  validateConnectHeaders,
} from '../connect-request.js';
import { localSettings } from '../hbone-settings.js';
import { PREFACE } from './frame.js';
import { H2Connection } from './h2-connection.js';
import { HpackDecoder } from './hpack.js';

/**
 * Property-based fuzzing of the HBONE parsers a peer reaches (issue 38): random and
 * mutated input must end in a value or a clean error, never a throw, and never in state
 * that grows without bound. CI runs a fixed seed and a small budget; `make fuzz` runs
 * ZMESH_FUZZ_RUNS (and any ZMESH_FUZZ_SEED) for longer.
 */
const RUNS = Number(process.env.ZMESH_FUZZ_RUNS ?? 300);
const SEED = Number(process.env.ZMESH_FUZZ_SEED ?? 38);
const params = { numRuns: RUNS, seed: SEED, endOnFailure: true };

/** One HTTP/2 frame with any type, flags and stream id, and a payload of plausible size. */
const anyFrame = fc
  .record({
    type: fc.oneof(fc.integer({ min: 0, max: 9 }), fc.integer({ min: 0, max: 255 })),
    flags: fc.integer({ min: 0, max: 255 }),
    streamId: fc.oneof(fc.constantFrom(0, 1, 2, 3, 5), fc.integer({ min: 0, max: 2 ** 31 - 1 })),
    payload: fc.uint8Array({ maxLength: 64 }),
  })
  .map(({ type, flags, streamId, payload }) => {
    const head = Buffer.alloc(9);
    head.writeUIntBE(payload.length, 0, 3);
    head[3] = type;
    head[4] = flags;
    head.writeUInt32BE(streamId, 5);
    return Buffer.concat([head, Buffer.from(payload)]);
  });
/** A client's SETTINGS first (so later frames get past §3.4), then what the fuzzer likes. */
const session = fc
  .array(anyFrame, { maxLength: 40 })
  .map((frames) => Buffer.concat([PREFACE, Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]), ...frames]));

/** A server-side connection over an in-memory socket that counts what it was made to write. */
function serverOn(): { socket: Duplex; conn: H2Connection; written: () => number } {
  let written = 0;
  const socket = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      written += chunk.length;
      cb();
    },
  });
  const conn = new H2Connection(socket, {
    role: 'server',
    settings: localSettings(200),
    connectionWindow: 16 * 1024 * 1024,
  });
  conn.on('error', () => {});
  conn.on('protocolError', () => {});
  conn.on('stream', (stream) => {
    stream.on('error', () => {});
    stream.respond({ ':status': 200 });
  });
  return { socket, conn, written: () => written };
}

test('H2Connection: random frame sequences end alive or in a connection error, never a throw', (t) => {
  fc.assert(
    fc.property(session, fc.integer({ min: 1, max: 64 }), (bytes, cut) => {
      const { socket, conn, written } = serverOn();
      // Fed in pieces, as TCP may cut it ('data' directly: a push() would wait for a tick).
      for (let off = 0; off < bytes.length; off += cut) socket.emit('data', bytes.subarray(off, off + cut));
      const bounded = conn.streamCount <= 200 && written() < 1024 * 1024;
      conn.destroy();
      socket.destroy();
      return bounded;
    }),
    params,
  );
  t.pass();
});

test('H2Connection: a valid request mutated byte by byte never throws', (t) => {
  const request = Buffer.concat([
    PREFACE,
    Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
    frame(
      FRAME.HEADERS,
      0x4,
      1,
      headerBlock([
        [':method', 'CONNECT'],
        [':authority', '127.0.0.1:9'],
      ]),
    ),
    frame(FRAME.DATA, 0x1, 1, Buffer.from('hello')),
  ]);
  fc.assert(
    fc.property(
      fc.array(fc.record({ at: fc.nat(request.length - 1), value: fc.integer({ min: 0, max: 255 }) }), {
        maxLength: 6,
      }),
      (mutations) => {
        const bytes = Buffer.from(request);
        if (mutations.length === 0) {
          const { socket, conn } = serverOn();
          let opened = false;
          conn.on('stream', () => {
            opened = true;
          });
          socket.emit('data', bytes);
          conn.destroy();
          if (!opened) return false; // the seed itself must be a valid request
        }
        for (const m of mutations) bytes[m.at] = m.value;
        const { socket, conn } = serverOn();
        socket.emit('data', bytes);
        conn.destroy();
        socket.destroy();
      },
    ),
    params,
  );
  t.pass();
});

test('HpackDecoder: any block decodes or is refused with a reason', (t) => {
  fc.assert(
    fc.property(fc.array(fc.uint8Array({ maxLength: 128 }), { maxLength: 4 }), (blocks) => {
      const decoder = new HpackDecoder({ maxTableSize: 4096 });
      for (const block of blocks) {
        const r = decoder.decode(Buffer.from(block));
        if (!r.ok && typeof r.error !== 'string') return false;
      }
      return true;
    }),
    params,
  );
  t.pass();
});

test('CONNECT parsers: any authority, forwarded-for, baggage and header map gives a result, never a throw', (t) => {
  const text = fc.oneof(fc.string({ maxLength: 64 }), fc.string({ unit: 'binary', maxLength: 64 }));
  fc.assert(
    fc.property(text, text, text, (authority, forwarded, baggage) => {
      parseConnectAuthority(authority);
      parseForwardedFor(forwarded);
      parseBaggage(baggage);
      const r = validateConnectHeaders({ ':method': 'CONNECT', ':authority': authority, baggage, forwarded });
      return typeof r.ok === 'boolean';
    }),
    params,
  );
  t.pass();
});
