import { isZmeshError } from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { FairScheduler } from './fair-scheduler.js';
import { CONTROL_TENANT } from './tenant-of.js';

/** Runs the event loop until `done()` holds; bounded so that a bug fails instead of hanging. */
async function until(done: () => boolean, maxTurns = 100_000): Promise<void> {
  for (let i = 0; i < maxTurns && !done(); i++) await new Promise((r) => setImmediate(r));
  if (!done()) throw new Error('condition not reached');
}

function gate(): { wait: () => Promise<void>; open: () => void } {
  let open!: () => void;
  const p = new Promise<void>((r) => {
    open = r;
  });
  return { wait: () => p, open };
}

function backlog(
  s: FairScheduler,
  tenant: string,
  n: number,
  cost: number,
  starts: string[],
): Promise<unknown>[] {
  return Array.from({ length: n }, () => s.schedule(tenant, cost, async () => void starts.push(tenant)));
}

function share(starts: string[], tenant: string, window: number): number {
  return starts.slice(0, window).filter((t) => t === tenant).length / window;
}

test('two backlogged tenants get equal shares within 10% over 1,000 items', async (t) => {
  const s = new FairScheduler({ maxInFlight: 1, maxQueuedPerTenant: 2000 });
  const starts: string[] = [];
  const all = [...backlog(s, 'a', 1000, 1, starts), ...backlog(s, 'b', 1000, 1, starts)];
  await Promise.all(all);
  const a = share(starts, 'a', 1000);
  t.true(Math.abs(a - 0.5) <= 0.05, `a had ${a} of the first 1,000 starts`);
});

test('shares follow costs: a tenant with 4x costlier items gets a quarter of the items', async (t) => {
  const s = new FairScheduler({ maxInFlight: 1, maxQueuedPerTenant: 2000, quantum: 4 });
  const starts: string[] = [];
  await Promise.all([...backlog(s, 'cheap', 1000, 1, starts), ...backlog(s, 'dear', 1000, 4, starts)]);
  const dear = share(starts, 'dear', 1000);
  t.true(Math.abs(dear - 0.2) <= 0.02, `dear had ${dear} of the first 1,000 starts (cost share 1/2)`);
});

test('weighted tenants get shares in proportion to their weights', async (t) => {
  const s = new FairScheduler({ maxInFlight: 1, maxQueuedPerTenant: 2000, weights: { gold: 3 } });
  const starts: string[] = [];
  await Promise.all([...backlog(s, 'gold', 1000, 1, starts), ...backlog(s, 'bronze', 1000, 1, starts)]);
  const gold = share(starts, 'gold', 1000);
  t.true(Math.abs(gold - 0.75) <= 0.075, `gold had ${gold} of the first 1,000 starts`);
});

test('costs far above the quantum are served without spinning and keep shares', async (t) => {
  const s = new FairScheduler({ maxInFlight: 1, quantum: 1, maxQueuedPerTenant: 200 });
  const starts: string[] = [];
  await Promise.all([...backlog(s, 'a', 100, 1e9, starts), ...backlog(s, 'b', 100, 1e9, starts)]);
  t.true(Math.abs(share(starts, 'a', 100) - 0.5) <= 0.05);
});

async function loneItemBehindBacklog(mode: 'fair' | 'fifo', quantum: number) {
  let clock = 0;
  const registry = new Registry();
  const s = new FairScheduler({
    mode,
    quantum,
    maxInFlight: 1,
    maxQueuedPerTenant: 10_000,
    registry,
    now: () => clock,
  });
  const starts: string[] = [];
  const heavy = Array.from({ length: 10_000 }, () =>
    s.schedule('heavy', 1, async () => {
      clock += 1; // each item takes 1 ms of the shared resource
      starts.push('heavy');
      await new Promise((r) => setImmediate(r)); // finishes on a later turn, like real I/O
    }),
  );
  await until(() => starts.length >= 100);
  const before = starts.length;
  const light = s.schedule('light', 1, async () => void starts.push('light'));
  await light;
  const overtaken = starts.indexOf('light') - before;
  if (overtaken < 0) throw new Error('light started before it was scheduled');
  await Promise.all(heavy);
  const text = await registry.metrics();
  const delay = Number(
    /zmesh_tenant_scheduler_delay_seconds_sum\{[^}]*tenant="light"\} (\S+)/.exec(text)![1],
  );
  return { overtaken, delay };
}

test('10,000 queued items of one tenant delay another tenant by at most a couple of quanta', async (t) => {
  const quantum = 4;
  const { overtaken, delay } = await loneItemBehindBacklog('fair', quantum);
  t.log(`light waited behind ${overtaken} heavy items, ${delay}s`);
  t.true(overtaken <= 2 * quantum, `light waited behind ${overtaken} heavy items`);
  t.true(delay <= (2 * quantum + 1) / 1000, `scheduler delay ${delay}s`);
});

test('fifo mode starves the lone item behind the backlog (the harness compares the modes)', async (t) => {
  const { overtaken, delay } = await loneItemBehindBacklog('fifo', 4);
  t.log(`light waited behind ${overtaken} heavy items, ${delay}s`);
  t.true(overtaken >= 9_000, `light waited behind ${overtaken} heavy items`);
  t.true(delay >= 9, `scheduler delay ${delay}s`);
});

test('the control lane starts at once while tenants saturate every slot', async (t) => {
  const s = new FairScheduler({ maxInFlight: 2, controlSlots: 1 });
  const g = gate();
  const tenantWork = Array.from({ length: 5 }, () => s.schedule('a', 1, g.wait));
  let controlRan = false;
  const control = s.schedule(CONTROL_TENANT, 1, async () => {
    controlRan = true;
  });
  t.true(controlRan, 'control work started synchronously');
  t.deepEqual(s.stats(), { inFlight: 2, controlInFlight: 1, queued: { a: 3 } });
  await control;
  t.is(s.stats().controlInFlight, 0);
  g.open();
  await Promise.all(tenantWork);
});

test('over its queue bound a tenant is refused with ZM_ERR_TENANT_QUEUE_FULL; others are not', async (t) => {
  const registry = new Registry();
  const s = new FairScheduler({ name: 'connect', maxInFlight: 1, maxQueuedPerTenant: 2, registry });
  const g = gate();
  const accepted = [1, 2, 3].map(() => s.schedule('noisy', 1, g.wait));
  const refused = await t.throwsAsync(s.schedule('noisy', 1, g.wait));
  t.true(isZmeshError(refused, 'ZM_ERR_TENANT_QUEUE_FULL'));
  t.is(refused?.message, 'tenant noisy has 2 items queued for connect');
  const quiet = s.schedule('quiet', 1, async () => 'ok');
  g.open();
  t.is(await quiet, 'ok');
  await Promise.all(accepted);
  const text = await registry.metrics();
  t.regex(text, /zmesh_tenant_refused_total\{scheduler="connect",tenant="noisy",reason="queue_full"\} 1/);
  t.regex(text, /zmesh_tenant_admitted_total\{scheduler="connect",tenant="noisy"\} 3/);
});

test('aborting a queued item removes it, rejects with the reason and never runs it', async (t) => {
  const s = new FairScheduler({ maxInFlight: 1 });
  const g = gate();
  const running = s.schedule('a', 1, g.wait);
  const ac = new AbortController();
  let ran = false;
  const mark = async () => {
    ran = true;
  };
  const queued = s.schedule('a', 1, mark, { signal: ac.signal });
  const next = s.schedule('b', 1, async () => 'b ran');
  t.deepEqual(s.stats().queued, { a: 1, b: 1 });
  ac.abort(new Error('caller gave up'));
  await t.throwsAsync(queued, { message: 'caller gave up' });
  t.deepEqual(s.stats().queued, { b: 1 });
  g.open();
  t.is(await next, 'b ran');
  await running;
  t.false(ran);
  await t.throwsAsync(
    s.schedule('a', 1, async () => 1, { signal: AbortSignal.abort(new Error('late')) }),
    {
      message: 'late',
    },
  );
});

test('a failing work item rejects its caller and frees its slot', async (t) => {
  const s = new FairScheduler({ maxInFlight: 1 });
  const failing = s.schedule('a', 1, () => {
    throw new Error('boom');
  });
  const after = s.schedule('a', 1, async () => 'after');
  await t.throwsAsync(failing, { message: 'boom' });
  t.is(await after, 'after');
  t.is(s.stats().inFlight, 0);
});

test('a tenant whose work hangs holds at most its share of the slots', async (t) => {
  const s = new FairScheduler({ maxInFlight: 4, maxInFlightPerTenant: 3 });
  const g = gate();
  const hanging = Array.from({ length: 10 }, () => s.schedule('blackhole', 1, g.wait));
  t.is(s.stats().inFlight, 3);
  t.is(await s.schedule('other', 1, async () => 'served'), 'served');
  g.open();
  await Promise.all(hanging);
  t.deepEqual(s.stats(), { inFlight: 0, controlInFlight: 0, queued: {} });
});
