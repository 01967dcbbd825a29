import { Duplex } from 'node:stream';
import test from 'ava';
import { ByteFairness } from './byte-fairness.js';
import { nodeContention, SharedQuotaTable, sharedQuotaBuffer } from './shared-quotas.js';
import { TenantQuotas } from './tenant-quotas.js';

test('two tables on one buffer count a tenant once (what two workers see)', (t) => {
  const buffer = sharedQuotaBuffer(16);
  const limits = { maxConnections: 3, connectBurst: 1000 };
  const one = new TenantQuotas({ defaults: limits, shared: new SharedQuotaTable(buffer) });
  const two = new TenantQuotas({ defaults: limits, shared: new SharedQuotaTable(buffer) });
  const held = [one.acquireConnection('shop'), two.acquireConnection('shop'), one.acquireConnection('shop')];
  t.true(held.every((r) => r.ok));
  t.false(two.acquireConnection('shop').ok, 'the fourth, on the other table, is over the node-wide 3');
  t.true(two.acquireConnection('other').ok, 'another tenant has its own slot');
  if (held[0]!.ok) held[0]!.value.release();
  t.true(two.acquireConnection('shop').ok, 'a release on one table frees a unit for the other');
  t.is(one.usage('shop').connections, 3);
});

test('the connect bucket is one for both tables', (t) => {
  const buffer = sharedQuotaBuffer(16);
  let now = 1000;
  const limits = { connectRate: 1, connectBurst: 4 };
  const tables = [0, 1].map(
    () => new TenantQuotas({ defaults: limits, shared: new SharedQuotaTable(buffer), now: () => now }),
  );
  let taken = 0;
  for (let i = 0; i < 10; i++) if (tables[i % 2]!.takeConnectToken('shop').ok) taken++;
  t.is(taken, 4, 'a burst of 4 node-wide, not 4 per table');
  now += 2000;
  t.true(tables[1]!.takeConnectToken('shop').ok, 'refilled at the shared rate');
});

test('a full table falls back to counting per table instead of refusing', (t) => {
  const q = new TenantQuotas({
    defaults: { maxConnections: 1 },
    shared: new SharedQuotaTable(sharedQuotaBuffer(1)),
  });
  t.true(q.acquireConnection('a').ok);
  t.true(q.acquireConnection('b').ok, 'b has no slot: counted locally');
  t.false(q.acquireConnection('b').ok);
});

test('contention is read node-wide: attempt rates, active tenants and pressure cross tables', (t) => {
  const buffer = sharedQuotaBuffer(16);
  const [one, two] = [new SharedQuotaTable(buffer), new SharedQuotaTable(buffer)];
  const now = 10_000;
  const storm = one.slotOf('storm', 10, now);
  const victim = two.slotOf('victim', 10, now);
  for (let i = 0; i < 30; i++) one.recordAttempt(storm, now);
  const seen = two.recordAttempt(victim, now);
  t.true(seen.fastestOther > seen.rate, 'the other table sees the storm as the fastest tenant');
  t.is(two.activeTenants(now), 0);
  one.addBytes(storm, 3000, now);
  two.addBytes(victim, 1000, now);
  one.addBytes(storm, 1000, now);
  t.is(one.activeTenants(now), 2, 'tenants moving bytes on either table count once each');
  t.is(two.windowOf(storm, now), 4000, "a tenant's bytes on every table add up in one window");
  t.deepEqual(two.byteWindows(now), { active: 2, total: 5000 });
  t.true(one.windowOf(storm, now + 1000) < 4000 / 2, 'and decay as each worker’s own window does');
  t.is(one.activeTenants(now + 1000), 0, 'and stop counting once quiet');
  t.false(two.pressured(now));
  one.markPressure(now);
  t.true(two.pressured(now + 10), 'one worker under pressure is the node under pressure');
  t.false(two.pressured(now + 1000));
});

/** The proxy's end of a connection: the test pushes what the peer sent; writes are dropped. */
function socket(): Duplex {
  return new Duplex({
    read() {},
    write(_chunk, _enc, cb) {
      cb();
    },
  });
}

test('byte fairness is node-wide: a tenant alone on its worker takes bulk turns and is paused for a tenant on another', async (t) => {
  const buffer = sharedQuotaBuffer(16);
  // Two workers' fairness on one buffer, ticked by hand: the flood's worker lags, the victim's does not.
  const worker = (lag: number) =>
    new ByteFairness({
      autoTick: false,
      lag: () => lag,
      utilization: () => 0,
      heavyLinkBytes: 1024,
      node: nodeContention(new SharedQuotaTable(buffer), () => 100),
    });
  const floodWorker = worker(100);
  const victimWorker = worker(0);
  const flood = [socket(), socket()];
  for (const down of flood) floodWorker.attach('flood', down, socket());
  const victim = socket();
  victimWorker.attach('victim', victim, socket());
  const turn = () => new Promise((r) => setImmediate(r));
  await turn();
  for (const down of flood) down.push(Buffer.alloc(64 * 1024));
  victim.push(Buffer.alloc(4 * 1024));
  await turn();
  victimWorker.tick();
  floodWorker.tick();
  t.is(floodWorker.activeTenants, 2, 'the flood’s worker sees the victim on the other worker');
  t.is(floodWorker.stats().flood!.paused, 1, 'its lag pauses the flood, the node’s heaviest tenant');
  t.true(
    flood.every((down) => down.isPaused()),
    'both flood links wait: the penalty, and bulk turns on a shared node',
  );
  t.false(victim.isPaused());
  t.is(
    victimWorker.stats().victim!.paused,
    0,
    'the victim, below an equal share of the node, is never paused',
  );
  floodWorker.close();
  victimWorker.close();
});

test('a dead worker’s share of every node-wide count is given back, and only its share', (t) => {
  const buffer = sharedQuotaBuffer(16);
  const limits = { maxConnections: 10, connectBurst: 1000 };
  const [zero, one] = [0, 1].map((w) => new SharedQuotaTable(buffer, w));
  const live = new TenantQuotas({ defaults: limits, shared: zero! });
  const dying = new TenantQuotas({ defaults: limits, shared: one! });
  t.true(live.acquireConnection('shop').ok);
  for (let i = 0; i < 3; i++) t.true(dying.acquireConnection('shop').ok);
  t.true(dying.acquirePending('shop').ok);
  zero!.buffered().publish(100);
  one!.buffered().publish(4000);
  t.true(one!.counter('preauth').tryAdd(1, 10));
  t.is(live.usage('shop').connections, 4);

  const main = new SharedQuotaTable(buffer);
  t.is(main.reclaim(1), 3 + 1 + 4000 + 1, 'connections, pending, bytes and the unauthenticated connection');
  t.deepEqual(
    { ...live.usage('shop'), tokens: 0 },
    { connections: 1, pending: 0, tokens: 0, bytes: 0 },
    'worker 0’s connection still counts',
  );
  t.is(main.buffered().total(), 100);
  t.is(main.counter('preauth').load(), 0);
  t.is(main.reclaim(1), 0, 'the ledger is clear: a second reclaim gives nothing');
  t.throws(() => new SharedQuotaTable(buffer, 16), { instanceOf: RangeError });
});

test('the node counters hold their limit across tables', (t) => {
  const buffer = sharedQuotaBuffer(4);
  const [a, b] = [0, 1].map((w) => new SharedQuotaTable(buffer, w).counter('preauth'));
  t.true(a!.tryAdd(1, 2));
  t.true(b!.tryAdd(1, 2));
  t.false(a!.tryAdd(1, 2), 'the third over both tables is refused');
  b!.sub(1);
  t.true(a!.tryAdd(1, 2));
});
