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
