import test from 'ava';
import { Registry } from 'prom-client';
import { startKeepalive } from '../hbone/keepalive.js';
import { guarded, guardedInterval, registerTaskFailures, taskFailures } from './guarded-task.js';
import { IdleReclaim } from './idle-reclaim.js';

/** Failures injected into periodic tasks never leave the event loop (issue 38). */
const uncaught: unknown[] = [];
process.on('uncaughtException', (e) => uncaught.push(e));
process.on('unhandledRejection', (e) => uncaught.push(e));

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits (up to 3 s: the machine may be loaded) until `task` has failed `n` times. */
async function failuresReach(task: string, n: number): Promise<number> {
  const deadline = Date.now() + 3000;
  let v = await taskFailures(task);
  while (v < n && Date.now() < deadline) {
    await tick(10);
    v = await taskFailures(task);
  }
  return v;
}

test.serial('a task that throws or rejects is counted and logged, never thrown', async (t) => {
  const before = await taskFailures('t_sync');
  guarded('t_sync', () => {
    throw new Error('boom');
  })();
  guarded('t_async', async () => {
    throw new Error('later');
  })();
  await tick(10);
  t.is((await taskFailures('t_sync')) - before, 1);
  t.is(await taskFailures('t_async'), 1);
  t.deepEqual(uncaught, []);
});

test.serial('an interval keeps running after its callback throws', async (t) => {
  let runs = 0;
  const timer = guardedInterval(
    't_interval',
    () => {
      runs++;
      throw new Error('every time');
    },
    5,
  );
  await failuresReach('t_interval', 3);
  clearInterval(timer);
  t.true(runs >= 3, `${runs} runs`);
  t.is(await taskFailures('t_interval'), runs);
  t.deepEqual(uncaught, []);
});

test.serial('the metric shows in every registry that registers it', async (t) => {
  const a = new Registry();
  const b = new Registry();
  registerTaskFailures(a);
  registerTaskFailures(a);
  registerTaskFailures(b);
  t.regex(await a.metrics(), /zmesh_task_failures_total\{task="t_sync"\} 1/);
  t.regex(await b.metrics(), /zmesh_task_failures_total/);
});

test.serial(
  'IdleReclaim whose probe fails with EMFILE (the crash of issue 38) is counted, not fatal',
  async (t) => {
    const reclaim = new IdleReclaim({
      registry: new Registry(),
      sampleMs: 5,
      utilization: () => {
        throw Object.assign(new Error('EMFILE: too many open files, uv_resident_set_memory'), {
          code: 'EMFILE',
        });
      },
    });
    await tick(50);
    reclaim.stop();
    t.true((await taskFailures('idle_reclaim')) >= 2);
    t.deepEqual(uncaught, []);
  },
);

test.serial('a keepalive whose ping throws is counted, not fatal', async (t) => {
  const stop = startKeepalive(
    {
      destroyed: false,
      closed: false,
      ping: () => {
        throw new Error('socket gone');
      },
    },
    { intervalMs: 5, timeoutMs: 1000 },
    () => {},
  );
  t.true((await failuresReach('hbone_keepalive', 1)) >= 1);
  stop();
  t.deepEqual(uncaught, []);
});
