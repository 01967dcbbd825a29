import test from 'ava';
import fc from 'fast-check';
import { FairScheduler } from './fair-scheduler.js';

interface Flow {
  weight: number;
  costs: number[];
}

/**
 * DRR's fairness bound (Shreedhar & Varghese, Theorem 2): while flows are all
 * backlogged, their service normalised by weight differs by at most a quantum plus a
 * couple of largest items (one carried as deficit, one started before the others queued).
 */
test('while backlogged, weighted service of any two tenants stays within the DRR bound', async (t) => {
  const quantum = 8;
  const maxCost = 8;
  const flows = fc.array(
    fc.record({
      weight: fc.integer({ min: 1, max: 4 }),
      costs: fc.array(fc.integer({ min: 1, max: maxCost }), { minLength: 40, maxLength: 80 }),
    }),
    { minLength: 2, maxLength: 5 },
  );
  await fc.assert(
    fc.asyncProperty(flows, async (spec: Flow[]) => {
      const weights = Object.fromEntries(spec.map((f, i) => [`t${i}`, f.weight]));
      const s = new FairScheduler({ maxInFlight: 1, quantum, weights, maxQueuedPerTenant: 100 });
      const starts: Array<{ tenant: number; cost: number }> = [];
      const all = spec.flatMap((f, i) =>
        f.costs.map((cost) => s.schedule(`t${i}`, cost, async () => void starts.push({ tenant: i, cost }))),
      );
      await Promise.all(all);
      const served = spec.map(() => 0);
      const left = spec.map((f) => f.costs.length);
      for (const { tenant, cost } of starts) {
        served[tenant]! += cost;
        if (--left[tenant]! === 0) break; // from here on that tenant is no longer backlogged
        const norm = served.map((v, i) => v / spec[i]!.weight);
        const wMin = Math.min(...spec.map((f) => f.weight));
        const bound = quantum + (2 * maxCost) / wMin; // a round's quantum, a carried deficit, a head start
        if (Math.max(...norm) - Math.min(...norm) > bound) return false;
      }
      return true;
    }),
    { numRuns: 40 },
  );
  t.pass();
});
