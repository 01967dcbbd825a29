import { isZmeshError } from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { MemoryGuard } from './memory-guard.js';
import { SharedQuotaTable, sharedQuotaBuffer } from './shared-quotas.js';

test('below the high-water mark nobody is named for shedding', (t) => {
  const g = new MemoryGuard({ capBytes: 1000, highWater: 0.8 });
  g.add('a', 500);
  g.add('b', 300);
  t.is(g.pressure(), 0.8);
  t.is(g.shedCandidate(), undefined);
});

test('past the high-water mark the largest consumer is named first', (t) => {
  const g = new MemoryGuard({ capBytes: 1000, highWater: 0.8 });
  g.add('small', 100);
  g.add('big', 600);
  g.add('medium', 150);
  t.is(g.shedCandidate(), 'big');
  g.remove('big', 500);
  t.is(g.shedCandidate(), undefined);
  t.is(g.used(), 350);
});

test('above the mark only the largest consumer is refused; at the cap everyone is', (t) => {
  const registry = new Registry();
  const g = new MemoryGuard({ capBytes: 1000, highWater: 0.5, registry });
  t.true(g.reserve('big', 500).ok);
  t.true(g.reserve('small', 100).ok);
  const shed = g.reserve('big', 10);
  t.false(shed.ok);
  if (!shed.ok) t.true(isZmeshError(shed.error, 'ZM_ERR_TENANT_MEMORY_PRESSURE'));
  t.true(g.reserve('small', 390).ok, 'a small tenant still gets memory under pressure');
  t.false(g.reserve('small', 11).ok, 'nobody passes the cap');
  t.is(g.used(), 990);
  t.is(g.pressure(), 0.99);
});

test('releasing more than held clamps at zero', (t) => {
  const g = new MemoryGuard({ capBytes: 1000 });
  g.add('a', 10);
  g.remove('a', 50);
  g.remove('nobody', 5);
  t.is(g.used(), 0);
  t.is(g.usageOf('a'), 0);
});

test("the buffered-bytes gauges report the guard's count when scraped", async (t) => {
  const registry = new Registry();
  const g = new MemoryGuard({ capBytes: 1000, registry });
  g.add('a', 300);
  g.add('b', 200);
  g.remove('a', 100);
  const scraped = await registry.getMetricsAsJSON();
  const value = (name: string) => scraped.find((m) => m.name === name)?.values[0]?.value;
  t.is(value('zmesh_buffered_bytes'), 400);
  t.is(value('zmesh_memory_pressure'), 0.4);
});

test('guards sharing a count hold one cap between them; each keeps its own tenants', (t) => {
  const buffer = sharedQuotaBuffer(4);
  const [one, two] = [0, 1].map(
    (w) =>
      new MemoryGuard({
        capBytes: 1000,
        highWater: 1,
        shared: new SharedQuotaTable(buffer, w).buffered(),
      }),
  );
  t.true(one!.reserve('a', 600).ok);
  t.false(two!.reserve('b', 500).ok, 'over the cap the two share');
  t.true(two!.reserve('b', 400).ok);
  t.is(one!.nodeUsed(), 1000);
  t.is(two!.used(), 400, "used() is this guard's own (the merged metric sums them)");
  t.is(one!.pressure(), 1);
  two!.remove('b', 400);
  t.is(one!.nodeUsed(), 600);
  t.throws(() => new MemoryGuard({ capBytes: 2 ** 31, shared: new SharedQuotaTable(buffer).buffered() }), {
    instanceOf: RangeError,
  });
});
