import test from 'ava';
import { Registry } from 'prom-client';
import { IdleReclaim, MAX_PAUSE_SHARE, MIN_GAP_MS } from './idle-reclaim.js';

/** An IdleReclaim driven by hand: utilisation samples, a clock, and counted collections. */
function driven(pauseMs = 0) {
  const registry = new Registry();
  const state = { u: 0, now: 0, rss: 100e6, collections: 0, trims: 0 };
  const reclaim = new IdleReclaim({
    registry,
    sampleMs: 0,
    utilization: () => state.u,
    collect: () => {
      state.collections += 1;
      state.now += pauseMs;
      state.rss -= 30e6;
    },
    trim: () => {
      state.trims += 1;
    },
    rss: () => state.rss,
    now: () => state.now,
  });
  const step = (u: number, advanceMs = 2000) => {
    state.u = u;
    state.now += advanceMs;
    reclaim.sample();
  };
  return { registry, state, step };
}

test('a process that stayed idle is never collected', (t) => {
  const { state, step } = driven();
  for (let i = 0; i < 10; i++) step(0.001);
  t.is(state.collections, 0);
  t.is(state.trims, 0);
});

test('nothing runs while traffic flows; the first quiet sample after it reclaims once', async (t) => {
  const { registry, state, step } = driven();
  for (let i = 0; i < 5; i++) step(0.6);
  t.is(state.collections, 0, 'busy samples never reclaim');
  step(0.015);
  t.is(state.collections, 0, 'between the busy and quiet thresholds: not yet quiet');
  step(0.002);
  t.is(state.collections, 1);
  t.is(state.trims, 1);
  for (let i = 0; i < 10; i++) step(0.002);
  t.is(state.collections, 1, 'one reclaim per busy period');
  const metrics = await registry.getMetricsAsJSON();
  const value = (name: string) => metrics.find((m) => m.name === name)?.values[0]?.value;
  t.is(value('zmesh_memory_reclaims_total'), 1);
  t.is(value('zmesh_memory_reclaimed_bytes_total'), 30e6);
});

test('a long pause spaces reclaims out so they cost at most 1% of the time', (t) => {
  const pauseMs = 200;
  const { state, step } = driven(pauseMs);
  step(0.5);
  step(0.001);
  t.is(state.collections, 1);
  const gap = pauseMs / MAX_PAUSE_SHARE;
  t.true(gap > MIN_GAP_MS);
  // Bursts and rests every 2 s: no second reclaim before the gap has passed.
  let elapsed = 0;
  while (elapsed + 4000 < gap) {
    step(0.5);
    step(0.001);
    elapsed += 4000;
  }
  t.is(state.collections, 1);
  step(0.5, gap - elapsed);
  step(0.001);
  t.is(state.collections, 2);
});
