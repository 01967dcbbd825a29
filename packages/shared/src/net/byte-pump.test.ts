import { PassThrough, Writable } from 'node:stream';
import test from 'ava';
import { PUMP_COALESCE_MIN_BYTES, PUMP_QUEUE_BYTES, pumpBytes } from './byte-pump.js';

/** A sink that records each write call (single or vectored) and completes on demand. */
function recordingSink(opts: { hold?: boolean } = {}) {
  const calls: number[][] = [];
  const pending: (() => void)[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      calls.push([chunk.length]);
      opts.hold ? pending.push(() => cb()) : cb();
    },
    writev(chunks, cb) {
      calls.push(chunks.map((c) => (c.chunk as Buffer).length));
      opts.hold ? pending.push(() => cb()) : cb();
    },
  });
  const release = () => {
    for (const complete of pending.splice(0)) complete();
  };
  return { sink, calls, release };
}

test('bytes arrive in order, are counted, and the source end ends the sink', async (t) => {
  const src = new PassThrough();
  const { sink, calls } = recordingSink();
  const counter = pumpBytes(src, sink);
  src.write('abc');
  src.end('de');
  await new Promise((r) => sink.once('finish', r));
  t.is(counter.bytes, 5);
  t.deepEqual(calls.flat(), [3, 2]);
});

test('a source paused on purpose before the pump (its first bytes sniffed and put back) still flows', async (t) => {
  const src = new PassThrough();
  src.write('ping');
  // What the waypoint's protocol sniffing does: read, pause, put the bytes back.
  const seen = await new Promise<Buffer>((resolve) => src.once('data', resolve));
  src.pause();
  src.unshift(seen);
  const { sink, calls } = recordingSink();
  const counter = pumpBytes(src, sink);
  await new Promise((r) => setImmediate(r));
  t.is(counter.bytes, 4, 'the put-back bytes were copied without the source ending');
  t.deepEqual(calls.flat(), [4]);
});

test('bulk chunks read in one loop turn leave in one vectored write', async (t) => {
  const src = new PassThrough();
  const { sink, calls } = recordingSink();
  pumpBytes(src, sink);
  for (let i = 0; i < 4; i++) src.write(Buffer.alloc(PUMP_COALESCE_MIN_BYTES));
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  t.deepEqual(calls, [Array(4).fill(PUMP_COALESCE_MIN_BYTES)]);
});

test('DATA frames cut at TLS record boundaries (just under 16 KiB, then a few bytes) leave in one vectored write', async (t) => {
  const src = new PassThrough();
  const { sink, calls } = recordingSink();
  pumpBytes(src, sink);
  // A 16,393-byte frame (header and 16 KiB) per 16,384-byte record: the cuts drift by 9.
  const cuts = [16_375, 9, 16_366, 18, 16_357, 27];
  for (const n of cuts) src.write(Buffer.alloc(n));
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  t.deepEqual(calls, [cuts]);
});

test('small chunks are written at once, not held for the loop turn', (t) => {
  const src = new PassThrough();
  const { sink, calls } = recordingSink();
  pumpBytes(src, sink);
  src.write('ping');
  // PassThrough emits 'data' on the next tick at the latest; flush it synchronously.
  src.read(0);
  return new Promise<void>((resolve) =>
    process.nextTick(() => {
      t.deepEqual(calls, [[4]]);
      resolve();
    }),
  );
});

test('the source pauses once the sink holds more than the queue bound, and resumes on drain', async (t) => {
  const src = new PassThrough({ highWaterMark: 1024 });
  const { sink, release } = recordingSink({ hold: true });
  pumpBytes(src, sink);
  const chunk = Buffer.alloc(64 * 1024);
  for (let i = 0; i < 8; i++) src.write(chunk);
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  t.true(src.isPaused());
  t.true(sink.writableLength > PUMP_QUEUE_BYTES);
  t.true(sink.writableLength <= PUMP_QUEUE_BYTES + chunk.length);
  release();
  await new Promise((r) => setImmediate(r));
  release();
  await new Promise((r) => setImmediate(r));
  t.false(src.isPaused());
});
