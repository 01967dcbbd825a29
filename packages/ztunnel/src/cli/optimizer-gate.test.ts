import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import test from 'ava';
import { DEFER_OPTIMIZER_FLAGS, OptimizerGate } from './optimizer-gate.js';

function gate(opts: { deferred: boolean; ready?: boolean; maxMs?: number }) {
  const state = { ready: opts.ready ?? false, enabled: 0 };
  const g = new OptimizerGate({
    deferred: opts.deferred,
    ready: () => state.ready,
    enable: () => {
      state.enabled += 1;
    },
    pollMs: 10,
    maxMs: opts.maxMs ?? 60_000,
  });
  return { g, state };
}

test('a process started with the optimizer on is left alone', (t) => {
  const { g, state } = gate({ deferred: false });
  t.true(g.on);
  g.check();
  t.is(state.enabled, 0);
});

test('a deferred optimizer goes on once start-up is over, and once only', (t) => {
  const { g, state } = gate({ deferred: true });
  t.teardown(() => g.stop());
  t.false(g.on);
  g.check();
  t.is(state.enabled, 0, 'not while start-up goes on');
  state.ready = true;
  g.check();
  t.true(g.on);
  g.check();
  t.is(state.enabled, 1);
});

test('a deferred optimizer goes on by itself when ready, polled', async (t) => {
  const { g, state } = gate({ deferred: true });
  t.teardown(() => g.stop());
  state.ready = true;
  await sleep(100);
  t.true(g.on);
  t.is(state.enabled, 1);
});

test('a start-up that never ends still gets the optimizer after the bound', async (t) => {
  const { g, state } = gate({ deferred: true, maxMs: 50 });
  t.teardown(() => g.stop());
  t.false(g.on);
  await sleep(200);
  t.true(g.on);
  t.is(state.enabled, 1);
});

/**
 * What the gate relies on, in a real V8 started as bin/zmesh starts ztunnel: a function
 * that ran hot while the optimizers were off (interpreted, then baseline-compiled) is
 * optimised (by Maglev or TurboFan) once the gate turns them on. On Node 24, `--no-turbofan`
 * alone failed the first check: Maglev optimised the function while "deferred". A Node whose V8 froze its flags after
 * start-up, or read this one only once, would fail here instead of leaving ztunnel's data
 * path unoptimised.
 */
const HOT_THEN_GATE = `
  const { OptimizerGate } = await import(process.argv[1]);
  function hot(a) { let s = 0; for (let i = 0; i < a.length; i++) s += a[i] * 2; return s; }
  const arr = Array.from({ length: 1000 }, (_, i) => i);
  const run = () => { for (let i = 0; i < 20000; i++) hot(arr); return %GetOptimizationStatus(hot); };
  let ready = false;
  const gate = new OptimizerGate({ ready: () => ready });
  const before = run();
  const onBefore = gate.on;
  ready = true;
  gate.check();
  const after = run();
  console.log(JSON.stringify({ before, after, onBefore, onAfter: gate.on }));
`;
/** V8's OptimizationStatus bit for optimised code, either tier (src/runtime/runtime.h). */
const OPTIMIZED = 1 << 4;

test('in V8 started with the optimizer off, a hot function is optimised once the gate opens', async (t) => {
  const module = new URL('./optimizer-gate.js', import.meta.url).href;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [...DEFER_OPTIMIZER_FLAGS, '--allow-natives-syntax', '--input-type=module', '-e', HOT_THEN_GATE, module],
    { timeout: 30_000 },
  );
  const r = JSON.parse(stdout) as { before: number; after: number; onBefore: boolean; onAfter: boolean };
  t.false(r.onBefore);
  t.is(r.before & OPTIMIZED, 0, `not optimised while deferred (status ${r.before.toString(2)})`);
  t.true(r.onAfter);
  t.not(r.after & OPTIMIZED, 0, `optimised once on (status ${r.after.toString(2)})`);
});
