import { isZmeshError, logger } from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { MemoryGuard } from './memory-guard.js';
import { RefusalLog } from './refusal-log.js';
import { TenantQuotas } from './tenant-quotas.js';

const log = logger('tenancy-test');
log.level = 'silent';
const tight = {
  maxConnections: 2,
  maxPendingConnects: 1,
  connectRate: 10,
  connectBurst: 3,
  maxBufferedBytes: 100,
};

function refusedQuota(t: import('ava').ExecutionContext, r: { ok: boolean; error?: unknown }, quota: string) {
  t.false(r.ok, `${quota} should be refused`);
  t.true(isZmeshError(r.error, 'ZM_ERR_TENANT_QUOTA'));
  t.is((r.error as { context: { quota: string } }).context.quota, quota);
}

test('open connections are refused over the limit and a released lease frees capacity', (t) => {
  const q = new TenantQuotas({ log, defaults: tight });
  const a = q.acquireConnection('shop');
  const b = q.acquireConnection('shop');
  t.true(a.ok && b.ok);
  refusedQuota(t, q.acquireConnection('shop'), 'connections');
  t.true(q.acquireConnection('other').ok, 'another tenant does not notice');
  if (a.ok) a.value.release();
  t.true(q.acquireConnection('shop').ok);
});

test('releasing a lease twice gives back only one unit', (t) => {
  const q = new TenantQuotas({ log, defaults: tight });
  const a = q.acquireConnection('shop');
  t.true(q.acquireConnection('shop').ok);
  if (!a.ok) return t.fail();
  a.value.release();
  a.value.release();
  t.true(a.value.released);
  t.is(q.usage('shop').connections, 1);
  t.true(q.acquireConnection('shop').ok);
  refusedQuota(t, q.acquireConnection('shop'), 'connections');
});

test('pending connects are refused over the limit', (t) => {
  const q = new TenantQuotas({ log, defaults: tight });
  const p = q.acquirePending('shop');
  refusedQuota(t, q.acquirePending('shop'), 'pending_connects');
  if (p.ok) p.value.release();
  t.true(q.acquirePending('shop').ok);
});

test('the connect token bucket allows a burst, then refills at the rate (injected clock)', (t) => {
  let now = 0;
  const q = new TenantQuotas({ log, defaults: tight, now: () => now });
  // Each take reports what is left, for the pod's kernel throttle to start from.
  const left = [0, 1, 2].map(() => q.takeConnectToken('shop'));
  t.deepEqual(
    left.map((r) => (r.ok ? r.value : r.error.code)),
    [2, 1, 0].map((tokens) => ({ rate: 10, burst: 3, tokens })),
  );
  refusedQuota(t, q.takeConnectToken('shop'), 'connect_rate');
  now += 99; // 10/s: just under one token
  refusedQuota(t, q.takeConnectToken('shop'), 'connect_rate');
  now += 1;
  t.true(q.takeConnectToken('shop').ok);
  now += 60_000; // refill caps at the burst
  t.is(q.usage('shop').tokens, 3);
});

test('a contended connect rate refills slower and its bucket holds only the contended burst', (t) => {
  let now = 0;
  const q = new TenantQuotas({
    log,
    defaults: { ...tight, connectRate: 100, connectBurst: 100 },
    now: () => now,
  });
  const contended = { rate: 10, burst: 5 };
  t.true(q.takeConnectToken('storm', contended).ok, 'the full bucket is cut to 5 tokens');
  for (let i = 0; i < 4; i++) t.true(q.takeConnectToken('storm', contended).ok);
  const refused = q.takeConnectToken('storm', contended);
  refusedQuota(t, refused, 'connect_rate');
  t.regex(refused.ok ? '' : refused.error.message, /10\/s while the node is contended/);
  now += 100; // 10/s: one token, where the tenant's own rate would give ten
  t.true(q.takeConnectToken('storm', contended).ok);
  refusedQuota(t, q.takeConnectToken('storm', contended), 'connect_rate');
  now += 1_000; // ten tokens at 10/s, but the contended bucket holds five
  for (let i = 0; i < 5; i++) t.true(q.takeConnectToken('storm', contended).ok);
  refusedQuota(t, q.takeConnectToken('storm', contended), 'connect_rate');
  now += 100;
  for (let i = 0; i < 10; i++) t.true(q.takeConnectToken('storm').ok, 'uncontended: its own rate again');
  for (let i = 0; i < 50; i++)
    t.true(
      q.takeConnectToken('victim', { rate: 1_000, burst: 1_000 }).ok,
      'limits above its own change nothing',
    );
});

test('buffered bytes are refused over the limit and released bytes free capacity', (t) => {
  const q = new TenantQuotas({ log, defaults: tight });
  t.true(q.reserveBytes('shop', 60).ok);
  refusedQuota(t, q.reserveBytes('shop', 41), 'buffered_bytes');
  q.releaseBytes('shop', 30);
  t.true(q.reserveBytes('shop', 70).ok);
  q.releaseBytes('shop', 1_000);
  t.is(q.usage('shop').bytes, 0);
});

test('per-tenant overrides replace the defaults for that tenant only', (t) => {
  const q = new TenantQuotas({ log, defaults: tight, overrides: { big: { maxConnections: 5 } } });
  for (let i = 0; i < 5; i++) t.true(q.acquireConnection('big').ok);
  refusedQuota(t, q.acquireConnection('big'), 'connections');
  t.is(q.limitsOf('small').maxConnections, 2);
  q.setOverride('big', undefined);
  t.is(q.limitsOf('big').maxConnections, 2);
  t.throws(() => q.setOverride('bad', { maxConnections: -1 }));
});

test('buffered bytes also need the node memory guard, which sheds the largest tenant', (t) => {
  const memory = new MemoryGuard({ capBytes: 150, highWater: 0.5 });
  const q = new TenantQuotas({ log, defaults: tight, memory });
  t.true(q.reserveBytes('big', 90).ok);
  const shed = q.reserveBytes('big', 5);
  t.false(shed.ok);
  if (!shed.ok) t.true(isZmeshError(shed.error, 'ZM_ERR_TENANT_MEMORY_PRESSURE'));
  t.true(q.reserveBytes('small', 50).ok);
  q.releaseBytes('big', 90);
  t.is(memory.used(), 50);
});

test('refusals count per tenant and quota in the registry', async (t) => {
  const registry = new Registry();
  const q = new TenantQuotas({ log, defaults: tight, registry });
  for (let i = 0; i < 5; i++) q.acquirePending('shop');
  t.regex(
    await registry.metrics(),
    /zmesh_tenant_quota_refused_total\{tenant="shop",quota="pending_connects"\} 4/,
  );
});

test('refusal logs are rate limited per tenant and quota', (t) => {
  let now = 0;
  const lines: unknown[] = [];
  const fake = { warn: (fields: unknown) => lines.push(fields) } as never;
  const log = new RefusalLog(1000, () => now, fake);
  const fields = { tenant: 'shop', kind: 'connections' };
  t.true(log.refused('shop', 'connections', fields, 'x'));
  for (let i = 0; i < 100; i++) log.refused('shop', 'connections', fields, 'x');
  t.true(log.refused('shop', 'connect_rate', {}, 'x'), 'another quota has its own budget');
  now = 1000;
  t.true(log.refused('shop', 'connections', fields, 'x'));
  t.is(lines.length, 3);
  t.like(lines[2], { tenant: 'shop', kind: 'connections', suppressed: 100 });
});

test('refusal log entries of subjects gone quiet are pruned once there are many', (t) => {
  let now = 0;
  const log = new RefusalLog(1000, () => now, { warn: () => {} } as never);
  for (let i = 0; i < 1024; i++) log.refused(`pod-${i}`, 'pending_config', {}, 'x');
  t.is(log.size, 1024);
  now = 500;
  log.refused('pod-new', 'pending_config', {}, 'x');
  t.is(log.size, 1025, 'nothing is pruned while every entry is within its interval');
  now = 1200;
  t.true(log.refused('pod-0', 'pending_config', {}, 'x'), 'an existing entry logs again after its interval');
  log.refused('pod-newer', 'pending_config', {}, 'x');
  t.is(log.size, 3, 'only the entries refused within the last interval are left');
});
