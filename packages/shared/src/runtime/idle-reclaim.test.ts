import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
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

test('start-up counts as work: the first quiet sample reclaims once, then an idle process never again', (t) => {
  const { state, step } = driven();
  step(0.001);
  t.is(state.collections, 1);
  t.is(state.trims, 1);
  for (let i = 0; i < 10; i++) step(0.001);
  t.is(state.collections, 1);
  t.is(state.trims, 1);
});

test('nothing runs while traffic flows; the first quiet sample after it reclaims once', async (t) => {
  const { registry, state, step } = driven();
  step(0.001); // the start-up reclaim
  state.collections = 0;
  state.trims = 0;
  state.rss = 100e6;
  state.now += MIN_GAP_MS;
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
  t.is(value('zmesh_memory_reclaims_total'), 2, 'with the start-up one');
  t.is(value('zmesh_memory_reclaimed_bytes_total'), 60e6);
});

test('a long pause spaces reclaims out so they cost at most 1% of the time', (t) => {
  const pauseMs = 200;
  const { state, step } = driven(pauseMs);
  step(0.001);
  t.is(state.collections, 1, 'the start-up reclaim');
  state.collections = 0;
  state.now += pauseMs / MAX_PAUSE_SHARE;
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

/**
 * A child node with --expose-gc leaves a fragmented old generation (a third of 300,000
 * objects kept, spread over every page), collects it, and reports the old space's size
 * over its live bytes: 1.35-1.42x after a plain full collection here, 1.03-1.08x after a
 * compacting one.
 */
const FRAGMENTED = `
  import { getHeapSpaceStatistics } from 'node:v8';
  const { compactingGc } = await import(process.argv[1]);
  const keep = [];
  let drop = [];
  for (let i = 0; i < 300000; i++) { const o = { i, s: 'x' + i, a: [i] }; (i % 3 === 0 ? keep : drop).push(o); }
  drop = null; // all of it was promoted while it was allocated; two thirds of it dies now
  const collect = process.argv[2] === 'compacting' ? compactingGc() : () => gc();
  collect();
  const old = getHeapSpaceStatistics().find((s) => s.space_name === 'old_space');
  console.log(JSON.stringify({ ratio: old.space_size / old.space_used_size, kept: keep.length }));
`;

async function oldSpaceRatio(mode: 'compacting' | 'plain'): Promise<number> {
  const module = new URL('./idle-reclaim.js', import.meta.url).href;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--expose-gc', '--input-type=module', '-e', FRAGMENTED, module, mode],
    { timeout: 30_000 },
  );
  return (JSON.parse(stdout) as { ratio: number }).ratio;
}

test('the default collection compacts: the emptied old-generation pages are released', async (t) => {
  const plain = await oldSpaceRatio('plain');
  const compacting = await oldSpaceRatio('compacting');
  t.true(plain > 1.25, `a plain collection keeps the fragmented pages: ${plain.toFixed(2)}x live`);
  t.true(compacting < 1.15, `compacting releases them: ${compacting.toFixed(2)}x live`);
});
