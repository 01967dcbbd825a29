import { Duplex } from 'node:stream';
import test from 'ava';
import { ByteFairness, type ByteFairnessOptions } from './byte-fairness.js';
import { MemoryGuard } from './memory-guard.js';

const turn = () => new Promise((r) => setImmediate(r));

/** The proxy's end of a connection: the test pushes what the peer "sent"; writes are kept. */
function socket(): Duplex & { written: number } {
  const d = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      d.written += chunk.length;
      cb();
    },
  }) as Duplex & { written: number };
  d.written = 0;
  return d;
}

/** A peer that reads nothing until `flush()`: each write's callback is held. */
function stalledSocket(highWaterMark: number): Duplex & { flush(): void } {
  const held: Array<() => void> = [];
  const d = new Duplex({
    read() {},
    highWaterMark,
    write(_chunk, _enc, cb) {
      held.push(cb);
    },
  }) as Duplex & { flush(): void };
  d.flush = () => {
    while (held.length > 0) held.shift()!();
  };
  return d;
}

function manual(opts: { lag?: () => number; maxBufferedPerTenant?: number; memory?: MemoryGuard } = {}) {
  const clock = { now: 0 };
  const fair = new ByteFairness({
    autoTick: false,
    now: () => clock.now,
    pauseMs: 50,
    lagThresholdMs: 20,
    // Every link counts as heavy here, so these tests see whole-tenant penalties.
    heavyLinkBytes: 0,
    ...opts,
  });
  return { fair, clock };
}

/** Ticked by hand, never lagging; a link is bulk from 1 KiB. */
function bulkManual(opts: ByteFairnessOptions) {
  const clock = { now: 0 };
  const fair = new ByteFairness({
    autoTick: false,
    now: () => clock.now,
    lag: () => 0,
    heavyLinkBytes: 1024,
    ...opts,
  });
  return { fair, clock };
}

test('bytes are copied both ways and counted per tenant', async (t) => {
  const { fair } = manual();
  const down = socket();
  const up = socket();
  fair.attach('shop', down, up);
  await turn();
  down.push(Buffer.alloc(100));
  up.push(Buffer.alloc(30));
  await turn();
  t.is(up.written, 100);
  t.is(down.written, 30);
  t.like(fair.stats().shop, { bytes: 130, paused: 0, buffered: 0 });
});

test('under event loop lag the heaviest tenant is paused, the light one keeps flowing', async (t) => {
  let lag = 0;
  const { fair, clock } = manual({ lag: () => lag });
  const heavy = { down: socket(), up: socket() };
  const light = { down: socket(), up: socket() };
  fair.attach('heavy', heavy.down, heavy.up);
  fair.attach('light', light.down, light.up);
  await turn();
  for (let round = 0; round < 10; round++) {
    heavy.down.push(Buffer.alloc(64 * 1024));
    light.down.push(Buffer.alloc(1024));
    await turn();
    lag = 100;
    clock.now += 50;
    fair.tick();
    // A pause lasts 50 ms and is followed by 50 ms of free reading: every other round.
    t.is(heavy.down.isPaused(), round % 2 === 0, `heavy in round ${round}`);
    t.false(light.down.isPaused(), `light flowing in round ${round}`);
  }
  t.is(fair.stats().heavy!.paused, 5);
  t.is(fair.stats().light!.paused, 0, 'a tenant below an equal share is never paused for lag');
  lag = 0;
  clock.now += 50;
  fair.tick();
  t.false(heavy.down.isPaused(), 'the pause is bounded: lifted once lag is gone');
  await turn();
  await turn(); // bulk writes are corked until the check phase
  t.is(heavy.up.written, 10 * 64 * 1024, 'nothing was lost while paused');
});

test('a lone tenant is never paused for lag: there is nobody to yield to', async (t) => {
  const { fair, clock } = manual({ lag: () => 100 });
  const s = { down: socket(), up: socket() };
  fair.attach('only', s.down, s.up);
  await turn();
  for (let i = 0; i < 5; i++) {
    s.down.push(Buffer.alloc(1000));
    await turn();
    fair.tick();
    clock.now += 25;
    t.false(s.down.isPaused());
  }
  t.is(fair.stats().only!.paused, 0);
});

test('a tenant whose connections went quiet does not share the loop: the busy one is not paused for it', async (t) => {
  const { fair, clock } = manual({ lag: () => 100 });
  const busy = { down: socket(), up: socket() };
  const hoard = { down: socket(), up: socket() };
  fair.attach('busy', busy.down, busy.up);
  fair.attach('hoard', hoard.down, hoard.up);
  await turn();
  hoard.down.push(Buffer.alloc(10)); // a greeting, then an idle connection held open
  busy.down.push(Buffer.alloc(1000));
  await turn();
  fair.tick();
  t.true(busy.down.isPaused(), 'while both moved bytes lately, the heavier waits');
  for (let i = 0; i < 40; i++) {
    clock.now += 100;
    busy.down.push(Buffer.alloc(1000));
    await turn();
    fair.tick();
  }
  t.is(fair.stats().hoard!.links, 2, 'the idle connection (a link each way) is still held');
  const pauses = fair.stats().busy!.paused;
  for (let i = 0; i < 10; i++) {
    clock.now += 100;
    busy.down.push(Buffer.alloc(1000));
    await turn();
    fair.tick();
    t.false(busy.down.isPaused(), `tick ${i}`);
  }
  t.is(fair.stats().busy!.paused, pauses, 'no more pauses once the other tenant went quiet');
});

test('a lag penalty lasts pauseMs and is followed by as long unpaused', async (t) => {
  const { fair, clock } = manual({ lag: () => 100 });
  const s = { down: socket(), up: socket() };
  const light = { down: socket(), up: socket() };
  fair.attach('only', s.down, s.up);
  fair.attach('light', light.down, light.up);
  await turn();
  s.down.push(Buffer.alloc(1000));
  light.down.push(Buffer.alloc(10));
  await turn();
  fair.tick();
  t.true(s.down.isPaused());
  clock.now += 49;
  fair.tick();
  t.true(s.down.isPaused());
  clock.now += 1;
  fair.tick();
  t.false(s.down.isPaused(), 'expired; reads freely for pauseMs before the next penalty');
  clock.now += 50;
  s.down.push(Buffer.alloc(1000));
  fair.tick();
  t.true(s.down.isPaused());
  t.is(fair.stats().only!.paused, 2);
});

test("a tenant's buffered bytes are capped across its pairs (plus one chunk per pair); other tenants flow", async (t) => {
  const cap = 32 * 1024;
  const { fair } = manual({ maxBufferedPerTenant: cap });
  const pairs = Array.from({ length: 8 }, () => ({ down: socket(), up: stalledSocket(16 * 1024) }));
  for (const p of pairs) fair.attach('heavy', p.down, p.up);
  const light = { down: socket(), up: socket() };
  fair.attach('light', light.down, light.up);
  await turn();
  for (let i = 0; i < 4; i++) {
    for (const p of pairs) p.down.push(Buffer.alloc(16 * 1024));
    light.down.push(Buffer.alloc(1024));
    await turn();
  }
  const heavy = fair.stats().heavy!;
  // Over the cap only pairs holding unflushed bytes wait, so a pair with nothing in flight
  // (a request/response exchange) is never held back by its tenant's bulk streams; the
  // bound is the cap plus one chunk per pair, and pairs are bounded by the connection quota.
  t.true(heavy.buffered <= cap + pairs.length * 16 * 1024, `heavy buffered ${heavy.buffered}`);
  t.true(heavy.buffered >= cap);
  t.true(
    pairs.every((p) => p.down.isPaused()),
    'every heavy pair holding bytes is paused',
  );
  t.true(heavy.paused >= 1);
  const late = { down: socket(), up: stalledSocket(1024) };
  fair.attach('heavy', late.down, late.up);
  t.false(late.down.isPaused(), 'a pair with nothing in flight may go on while its tenant is capped');
  late.down.push(Buffer.alloc(4096));
  await turn();
  t.true(late.down.isPaused(), 'and waits as soon as it holds unflushed bytes');
  t.is(light.up.written, 4 * 1024, 'light was not held back');
  for (const p of pairs) p.up.flush();
  await turn();
  const after = fair.stats().heavy!;
  t.true(after.bytes > heavy.bytes, 'draining lifts the cap and copying resumes');
  t.true(after.buffered <= cap + (pairs.length + 1) * 16 * 1024, `and stays capped: ${after.buffered}`);
});

test('the memory guard shed candidate is paused on tick', async (t) => {
  const memory = new MemoryGuard({ capBytes: 10_000, highWater: 0.1 });
  const { fair } = manual({ memory, lag: () => 0 });
  const big = { down: socket(), up: stalledSocket(64 * 1024) };
  const small = { down: socket(), up: socket() };
  fair.attach('big', big.down, big.up);
  fair.attach('small', small.down, small.up);
  await turn();
  big.down.push(Buffer.alloc(2000));
  small.down.push(Buffer.alloc(10));
  await turn();
  t.is(memory.usageOf('big'), 2000, 'unflushed bytes are reported to the guard');
  fair.tick();
  t.true(big.down.isPaused());
  t.false(small.down.isPaused());
  big.up.flush();
  await turn();
  t.is(memory.used(), 0);
});

test('one side closing destroys the other and detaches; detach returns buffered bytes', async (t) => {
  const { fair } = manual();
  const a = { down: socket(), up: socket() };
  fair.attach('shop', a.down, a.up);
  a.up.destroy();
  await turn();
  t.true(a.down.destroyed);
  t.deepEqual(fair.stats(), {});
  const memory = new MemoryGuard({ capBytes: 1e6 });
  const m = manual({ memory });
  const b = { down: socket(), up: stalledSocket(1024) };
  const detach = m.fair.attach('shop', b.down, b.up);
  await turn();
  b.down.push(Buffer.alloc(5000));
  await turn();
  t.is(memory.used(), 5000);
  detach();
  t.is(memory.used(), 0);
  t.true(b.down.isPaused(), 'left paused so no byte is dropped before the next owner reads');
  b.up.flush(); // late callbacks must not count twice
  t.is(memory.used(), 0);
});

test('with the default probe and timer it ticks by itself and close() stops it', async (t) => {
  const fair = new ByteFairness({ tickMs: 5 });
  const s = { down: socket(), up: socket() };
  fair.attach('shop', s.down, s.up);
  await turn();
  s.down.push(Buffer.alloc(1000));
  await new Promise((r) => setTimeout(r, 30));
  fair.close();
  const w = fair.stats().shop!.windowBytes;
  t.true(w > 0 && w < 1000, `window decayed by the timer: ${w}`);
});

test('the timer runs only while bytes move: idle it sleeps, the next byte wakes it with no stale lag', async (t) => {
  const fair = new ByteFairness({ tickMs: 50, windowMs: 10, lagThresholdMs: 250 });
  const s = { down: socket(), up: socket() };
  fair.attach('shop', s.down, s.up);
  t.false(fair.ticking, 'no bytes yet: no timer');
  await turn();
  s.down.push(Buffer.alloc(1000));
  await turn();
  t.true(fair.ticking);
  // 1000 bytes decay below one by the second tick (100 ms) with a 10 ms window.
  await new Promise((r) => setTimeout(r, 700));
  t.false(fair.ticking, 'asleep once no link moved bytes within the window');
  s.down.push(Buffer.alloc(1000));
  await turn();
  t.true(fair.ticking, 'woken by the next byte');
  await new Promise((r) => setTimeout(r, 70));
  // One tick since the wake: its lag counts from the wake, not from the last tick before
  // the sleep (which would read ~650 ms, over the 250 ms threshold).
  t.false(fair.pressured, 'a sleep is not lag');
  t.is(s.up.written, 2000);
  fair.close();
  t.false(fair.ticking);
  s.down.push(Buffer.alloc(10));
  await turn();
  t.false(fair.ticking, 'closed: bytes flow without fairness');
  t.is(s.up.written, 2010);
});

test("under lag a penalised tenant's heavy links wait while its request/response links flow", async (t) => {
  const clock = { now: 0 };
  const fair = new ByteFairness({
    autoTick: false,
    now: () => clock.now,
    pauseMs: 50,
    lagThresholdMs: 20,
    lag: () => 100,
    heavyLinkBytes: 64 * 1024,
  });
  const bulk = { down: socket(), up: socket() };
  const rpc = { down: socket(), up: socket() };
  const other = { down: socket(), up: socket() };
  fair.attach('noisy', bulk.down, bulk.up);
  fair.attach('noisy', rpc.down, rpc.up);
  fair.attach('quiet', other.down, other.up);
  await turn();
  for (let i = 0; i < 4; i++) bulk.down.push(Buffer.alloc(64 * 1024));
  rpc.down.push(Buffer.alloc(100));
  other.down.push(Buffer.alloc(100));
  await turn();
  fair.tick();
  t.true(bulk.down.isPaused(), 'the bulk link of the heaviest tenant waits');
  t.false(rpc.down.isPaused(), 'its light link does not');
  t.false(other.down.isPaused());
});

test("a tenant's bulk links take turns: bulkSlots copy at once, the others wait a tick, light links never", async (t) => {
  const { fair, clock } = bulkManual({ bulkSlots: 2 });
  const bulk = Array.from({ length: 4 }, () => ({ down: socket(), up: socket() }));
  const rpc = { down: socket(), up: socket() };
  for (const b of bulk) fair.attach('flood', b.down, b.up);
  fair.attach('flood', rpc.down, rpc.up);
  await turn();
  for (const b of bulk) b.down.push(Buffer.alloc(4096));
  rpc.down.push(Buffer.alloc(100));
  await turn();
  const open = () => bulk.map((b, i) => (b.down.isPaused() ? -1 : i)).filter((i) => i >= 0);
  clock.now += 10;
  fair.tick();
  t.deepEqual(open(), [0, 1, 2, 3], 'alone on the loop, every bulk link copies');
  // Another tenant's request/response traffic: now the loop is shared.
  const victim = { down: socket(), up: socket() };
  fair.attach('victim', victim.down, victim.up);
  await turn();
  victim.down.push(Buffer.alloc(100));
  for (const b of bulk) b.down.push(Buffer.alloc(4096));
  await turn();
  clock.now += 10;
  fair.tick();
  const first = open();
  t.is(first.length, 2, 'two bulk links copy this tick');
  t.false(rpc.down.isPaused(), 'the request/response link is never parked');
  clock.now += 10;
  fair.tick();
  const second = open();
  t.is(second.length, 2);
  t.deepEqual([...first, ...second].sort(), [0, 1, 2, 3], 'the next tick is the other links’ turn');
  t.false(rpc.down.isPaused());
  fair.close();
});

test('while another tenant is active a bulk link queues at most sharedQueueBytes in its destination', async (t) => {
  const { fair, clock } = bulkManual({
    bulkSlots: 10,
    queueBytes: 256 * 1024,
    sharedQueueBytes: 64 * 1024,
  });
  const src = socket();
  const dst = stalledSocket(16 * 1024);
  fair.attach('bulk', src, dst);
  const send = async (kib: number) => {
    for (let i = 0; i < kib / 16; i++) src.push(Buffer.alloc(16 * 1024));
    await turn();
  };
  await send(128);
  t.false(src.isPaused(), 'alone on the loop: 128 KiB queued is under the 256 KiB bound');
  const other = { down: socket(), up: socket() };
  fair.attach('victim', other.down, other.up);
  other.down.push(Buffer.alloc(100));
  await turn();
  clock.now += 10;
  fair.tick();
  t.is(fair.activeTenants, 2);
  await send(16);
  t.true(src.isPaused(), 'shared: over 64 KiB queued, the source waits for drain');
  dst.flush();
  await turn();
  t.false(src.isPaused(), 'drained, it reads again');
  fair.close();
});

test('a saturated loop penalises the heaviest tenant even when no single turn is late', async (t) => {
  const clock = { now: 0 };
  const fair = new ByteFairness({
    autoTick: false,
    now: () => clock.now,
    pauseMs: 50,
    lag: () => 0,
    utilization: () => 0.99,
    heavyLinkBytes: 0,
  });
  const heavy = { down: socket(), up: socket() };
  const light = { down: socket(), up: socket() };
  fair.attach('heavy', heavy.down, heavy.up);
  fair.attach('light', light.down, light.up);
  await turn();
  heavy.down.push(Buffer.alloc(256 * 1024));
  light.down.push(Buffer.alloc(100));
  await turn();
  clock.now += 10;
  fair.tick();
  t.true(heavy.down.isPaused(), 'the tenant above its share waits');
  t.false(light.down.isPaused());
  t.is(fair.stats().heavy!.paused, 1);
  fair.close();
});

test('idle links leave the tick: a hoard of idle connections is not walked every tick', async (t) => {
  const clock = { now: 0 };
  const fair = new ByteFairness({ autoTick: false, now: () => clock.now, lag: () => 0, windowMs: 10 });
  const pair = { down: socket(), up: socket() };
  fair.attach('hoard', pair.down, pair.up);
  await turn();
  pair.down.push(Buffer.alloc(1000));
  await turn();
  clock.now += 10;
  fair.tick();
  t.true(fair.stats().hoard!.windowBytes > 0);
  for (let i = 0; i < 20; i++) {
    clock.now += 10;
    fair.tick();
  }
  t.true(fair.stats().hoard!.windowBytes < 1, 'the window decays to nothing');
  pair.down.push(Buffer.alloc(10));
  await turn();
  t.is(pair.up.written, 1010, 'an idle link that wakes up copies at once');
  fair.close();
});

/** An HTTP/2 stream's shape as teardown sees it: `close(code)` sends RST_STREAM. */
function h2Stream(): Duplex & { rstCode?: number; closedWith?: number; close(code: number): void } {
  const d = socket() as unknown as Duplex & {
    rstCode?: number;
    closedWith?: number;
    close(code: number): void;
  };
  d.rstCode = undefined;
  d.close = (code: number) => {
    d.closedWith = code;
    d.destroy();
  };
  return d;
}

test('a socket that closes abruptly resets the HTTP/2 stream it was paired with; a clean close does not', async (t) => {
  const { fair } = manual();
  const abrupt = { down: socket(), up: h2Stream() };
  fair.attach('slow', abrupt.down, abrupt.up);
  abrupt.down.destroy(); // the client went away mid-stream (a reset socket)
  await turn();
  t.is(abrupt.up.closedWith, 8, 'RST_STREAM(CANCEL), not a destroy the peer would wait on');
  t.deepEqual(fair.stats(), {}, 'the pair is detached');

  const clean = { down: socket(), up: h2Stream() };
  fair.attach('ok', clean.down, clean.up);
  clean.down.push(null); // the client's end ...
  clean.down.end(); // ... and ours, both flushed
  clean.down.resume();
  await turn();
  clean.down.destroy();
  await turn();
  t.is(clean.up.closedWith, undefined, 'a clean close leaves the stream to end by itself');
  fair.close();
});

test("an HTTP/2 stream's bytes never wait for a bulk turn: only links reading a socket take turns", async (t) => {
  const { fair, clock } = bulkManual({ bulkSlots: 1 });
  // The inbound side of a tunnel: the source is an HTTP/2 stream (the session already read it).
  const stream = () => Object.assign(socket(), { rstCode: undefined, close() {} });
  const tunnels = Array.from({ length: 3 }, () => ({ down: stream(), up: socket() }));
  const sockets = Array.from({ length: 3 }, () => ({ down: socket(), up: socket() }));
  for (const p of [...tunnels, ...sockets]) fair.attach('flood', p.down, p.up);
  const victim = { down: socket(), up: socket() };
  fair.attach('victim', victim.down, victim.up);
  await turn();
  for (const p of [...tunnels, ...sockets]) p.down.push(Buffer.alloc(4096));
  victim.down.push(Buffer.alloc(100));
  await turn();
  for (let tick = 0; tick < 3; tick++) {
    clock.now += 10;
    fair.tick();
    t.is(fair.activeTenants, 2);
    t.deepEqual(
      tunnels.map((p) => p.down.isPaused()),
      [false, false, false],
      'streams copy every tick',
    );
    t.is(sockets.filter((p) => !p.down.isPaused()).length, 1, 'one socket-read bulk link per tick');
  }
  fair.close();
});

test('DATA frames cut at TLS record boundaries are copied to the socket in one vectored write', async (t) => {
  const { fair } = bulkManual({});
  // The inbound side of a tunnel: the stream delivers each 16 KiB frame cut by a record.
  const down = Object.assign(socket(), { rstCode: undefined, close() {} });
  const calls: number[][] = [];
  const up = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      calls.push([chunk.length]);
      cb();
    },
    writev(chunks, cb) {
      calls.push(chunks.map((c) => (c.chunk as Buffer).length));
      cb();
    },
  });
  fair.attach('bulk', down, up);
  await turn();
  const cuts = [16_375, 9, 16_366, 18, 16_357, 27];
  for (const n of cuts) down.push(Buffer.alloc(n));
  await turn();
  await turn();
  t.deepEqual(calls, [cuts]);
  fair.close();
});
