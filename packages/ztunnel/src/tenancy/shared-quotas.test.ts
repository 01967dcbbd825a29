import test from 'ava';
import { SharedQuotaTable, sharedQuotaBuffer } from './shared-quotas.js';
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
  one.markActive(storm, now);
  two.markActive(victim, now);
  t.is(one.activeTenants(now), 2, 'tenants moving bytes on either table count once each');
  t.is(one.activeTenants(now + 1000), 0, 'and stop counting once quiet');
  t.false(two.pressured(now));
  one.markPressure(now);
  t.true(two.pressured(now + 10), 'one worker under pressure is the node under pressure');
  t.false(two.pressured(now + 1000));
});
