import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import test from 'ava';
import { Registry } from 'prom-client';
import { IdleReclaim, MAX_PAUSE_SHARE, MIN_GAP_MS, QUIET_BEFORE_RECLAIM_MS } from './idle-reclaim.js';

/** An IdleReclaim driven by hand: utilisation samples, a clock, and counted collections. */
function driven(pauseMs = 0) {
  const registry = new Registry();
  const state = { u: 0, now: 0, rss: 100e6, collections: 0, scavenges: 0, trims: 0 };
  // Utilisation as the probe measures it: since its previous call, so a collection's pause
  // counts towards the next call unless that call comes right after the pause.
  let pausedMs = 0;
  const reclaim = new IdleReclaim({
    registry,
    sampleMs: 0,
    utilization: () => {
      const u = pausedMs > 0 ? Math.max(state.u, pausedMs / 2000) : state.u;
      pausedMs = 0;
      return u;
    },
    collect: () => {
      state.collections += 1;
      state.now += pauseMs;
      pausedMs += pauseMs;
      state.rss -= 30e6;
    },
    scavenge: () => {
      state.scavenges += 1;
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
  /** The quiet samples a busy process needs before it reclaims: one starts the quiet, then QUIET_BEFORE_RECLAIM_MS. */
  const rest = (u = 0.001) => {
    for (let i = 0; i < 1 + Math.ceil(QUIET_BEFORE_RECLAIM_MS / 2000); i++) step(u);
  };
  return { registry, state, step, rest };
}

test('start-up counts as work: the process reclaims once it has been quiet, then never again while idle', (t) => {
  const { state, step, rest } = driven();
  step(0.001);
  t.is(state.scavenges, 1, 'the quiet begins with a young collection');
  t.is(state.collections, 0, 'and the reclaim waits');
  step(0.001);
  step(0.001);
  step(0.001);
  t.is(state.scavenges, 4, 'and each quiet sample until the reclaim runs one');
  t.is(state.collections, 0, '6 s of quiet is not yet enough');
  step(0.001);
  t.is(state.collections, 1);
  t.is(state.trims, 1);
  rest();
  rest();
  t.is(state.collections, 1);
  t.is(state.scavenges, 4, 'no young collection either');
  t.is(state.trims, 1);
});

test('nothing runs while traffic flows; once quiet after it, one reclaim', async (t) => {
  const { registry, state, step, rest } = driven();
  rest(); // the start-up reclaim
  state.collections = 0;
  state.scavenges = 0;
  state.trims = 0;
  state.rss = 100e6;
  for (let i = 0; i < 5; i++) step(0.6);
  t.is(state.collections + state.scavenges, 0, 'busy samples never collect');
  step(0.015);
  t.is(state.scavenges, 0, 'between the busy and quiet thresholds: not yet quiet');
  step(0.002);
  step(0.002);
  step(0.03);
  t.is(state.scavenges, 2, 'one per quiet sample');
  t.is(state.collections, 0, 'a busy sample ends the quiet');
  step(0.002);
  step(0.015);
  step(0.015);
  step(0.015);
  t.is(state.collections, 0);
  step(0.002);
  t.is(state.scavenges, 6, 'the new quiet: its first sample and the three between the thresholds');
  t.is(state.collections, 1, 'samples between the thresholds do not end a quiet that has begun');
  t.is(state.trims, 1);
  for (let i = 0; i < 10; i++) step(0.002);
  t.is(state.collections, 1, 'one reclaim per busy period');
  const metrics = await registry.getMetricsAsJSON();
  const value = (name: string) => metrics.find((m) => m.name === name)?.values[0]?.value;
  t.is(value('zmesh_memory_reclaims_total'), 2, 'with the start-up one');
  t.is(value('zmesh_memory_reclaimed_bytes_total'), 60e6);
});

test("a reclaim's own pause does not count as work: no second reclaim follows it", (t) => {
  const { state, step, rest } = driven(200);
  rest();
  t.is(state.collections, 1);
  for (let i = 0; i < 30; i++) step(0.001);
  t.is(state.collections, 1, 'a 200 ms pause would read as 10% utilisation in the next sample');
});

test('a long pause spaces reclaims out so they cost at most 1% of the time', (t) => {
  const pauseMs = 200;
  const { state, step, rest } = driven(pauseMs);
  rest();
  t.is(state.collections, 1, 'the start-up reclaim');
  state.collections = 0;
  state.now += pauseMs / MAX_PAUSE_SHARE;
  step(0.5);
  rest();
  t.is(state.collections, 1);
  const gap = pauseMs / MAX_PAUSE_SHARE;
  t.true(gap > MIN_GAP_MS);
  // Bursts, each followed by a rest long enough to reclaim: none before the gap has passed.
  const started = state.now;
  while (state.now - started + 10_000 < gap) {
    step(0.5);
    rest();
  }
  t.is(state.collections, 1);
  step(0.5, gap - (state.now - started));
  rest();
  t.is(state.collections, 2);
});

/**
 * A child node with --expose-gc leaves a fragmented old generation (a third of 300,000
 * objects kept, spread over every page), runs plain full collections until the sweeper
 * has given back all they give (old space stops shrinking), then runs the collection under
 * test and reports the old-space bytes it gave back beyond the plain ones and the old
 * space's size over its live bytes before and after it.
 * Both are measured in the same child: how much a single plain collection keeps depends
 * on V8's own choice of evacuation candidates and the concurrent sweeper's progress
 * (1.25-1.50x live over runs here), so a fixed ratio against another child flaked.
 * Read here over 8 runs: compacting freed 3.2-5.8 MB more and ended at 1.03-1.05x live; a
 * further plain collection freed nothing and stayed at 1.17-1.92x. Over 6 more: compacting
 * 1.02-1.04x, plain 1.20-1.37x, though one plain collection freed 12.6 MB.
 */
const FRAGMENTED = `
  import { getHeapSpaceStatistics } from 'node:v8';
  import { setTimeout as sleep } from 'node:timers/promises';
  const { compactingGc } = await import(process.argv[1]);
  const old = () => getHeapSpaceStatistics().find((s) => s.space_name === 'old_space');
  const keep = [];
  let drop = [];
  for (let i = 0; i < 300000; i++) { const o = { i, s: 'x' + i, a: [i] }; (i % 3 === 0 ? keep : drop).push(o); }
  drop = null; // all of it was promoted while it was allocated; two thirds of it dies now
  // Plain collections until old space stops shrinking: the sweeper has then given back all
  // a plain collection gives (one collection and 200 ms was not always enough: a second
  // plain one once freed 12.9 MB more).
  let before = Infinity;
  for (let i = 0; i < 10 && old().space_size < before; i++) {
    before = old().space_size;
    gc();
    await sleep(200);
  }
  before = old().space_size;
  const fragmented = before / old().space_used_size;
  const collect = process.argv[2] === 'compacting' ? compactingGc() : () => gc();
  collect();
  await sleep(200);
  const after = old();
  console.log(JSON.stringify({ freed: before - after.space_size, ratio: after.space_size / after.space_used_size, before: fragmented, kept: keep.length }));
`;

/** Old space over live below this: compacted (a plain collection here leaves 1.17-1.92x). */
const COMPACT_RATIO = 1.15;

interface Collection {
  freed: number;
  ratio: number;
  /** Old space over live after the plain collections, before the one under test. */
  before: number;
}

async function secondCollection(mode: 'compacting' | 'plain'): Promise<Collection> {
  const module = new URL('./idle-reclaim.js', import.meta.url).href;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--expose-gc', '--input-type=module', '-e', FRAGMENTED, module, mode],
    { timeout: 30_000 },
  );
  return JSON.parse(stdout) as Collection;
}

/**
 * The collection under test in a child whose plain collections left old space
 * fragmented. Now and then V8 picks evacuation candidates itself and a plain collection
 * compacts (in one run only 0.52 MB was left to free): such a child shows nothing about
 * the collection under test, so another one runs, up to FRAGMENTED_TRIES in all. On an
 * idle machine 6 children in 15 started below COMPACT_RATIO; with three tries, one CI run
 * of 2026-12-02 drew three such children in a row (~1 s each).
 */
const FRAGMENTED_TRIES = 8;

async function fragmentedCollection(mode: 'compacting' | 'plain'): Promise<Collection> {
  let got = await secondCollection(mode);
  for (let i = 1; i < FRAGMENTED_TRIES && got.before < COMPACT_RATIO; i++) got = await secondCollection(mode);
  return got;
}

test('the default collection compacts: the pages a plain collection keeps are released', async (t) => {
  const plain = await fragmentedCollection('plain');
  const compacting = await fragmentedCollection('compacting');
  const mb = (bytes: number) => `${(bytes / 1e6).toFixed(2)} MB`;
  t.log(
    `plain ${mb(plain.freed)} ${plain.ratio.toFixed(2)}x, compacting ${mb(compacting.freed)} ${compacting.ratio.toFixed(2)}x (from ${compacting.before.toFixed(2)}x)`,
  );
  // End states, not freed bytes, are compared: the plain collections before the one under
  // test do not always finish giving back (a further plain one once freed 12.6 MB more).
  // Node 24's V8 sometimes compacts in the plain collections of the set-up too, in every try
  // (1.08x after 8 tries in a quiet CI run of 2026-12-05): then there is nothing left for the
  // reclaim's collection to free, and only its end state can be judged.
  if (compacting.before >= COMPACT_RATIO)
    t.true(compacting.freed > 0, `compacting frees what the plain collections kept: ${mb(compacting.freed)}`);
  else t.log(`plain collections did not leave old space fragmented in ${FRAGMENTED_TRIES} tries`);
  t.true(
    compacting.ratio < COMPACT_RATIO,
    `the compacting collection leaves old space near live: ${compacting.ratio.toFixed(2)}x`,
  );
  // On Node 20 a further plain collection always left old space further from live than the
  // compacting one. Node 24's V8 sometimes compacts on its own in a plain collection (1.01x in
  // a quiet CI run of 2026-12-04), so that comparison is logged above, not asserted: what the
  // reclaim relies on is that its own collection compacts, asserted above.
});

/**
 * A child node with --expose-gc and V8's default young generation runs an IdleReclaim
 * (real timers, 500 ms samples) through a busy second (or more, until the young generation
 * has grown to 16 MB), ends that second with 8 MB of young and 32 MB of large-object garbage
 * allocated since its last scavenge (what a waypoint's warm-up leaves), then goes quiet;
 * it reports the young generation's size just after the reclaim.
 */
const BUSY_THEN_QUIET = `
  import { getHeapSpaceStatistics } from 'node:v8';
  import { createRequire } from 'node:module';
  import { setTimeout as sleep } from 'node:timers/promises';
  const { IdleReclaim } = await import(process.argv[1]);
  const { Registry } = createRequire(process.argv[1])('prom-client');
  const young = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
  const registry = new Registry();
  const options = { registry, sampleMs: 500, trim: () => {} };
  if (process.argv[2] === 'no-scavenge') options.scavenge = undefined;
  const reclaim = new IdleReclaim(options);
  let keep = [];
  const started = Date.now();
  // A second at least, and on until the young generation has grown (a loaded machine grew it
  // to 8 MB in one second), for at most five.
  while (Date.now() - started < 1000 || (young() < 16 * 2 ** 20 && Date.now() - started < 5000)) {
    for (let i = 0; i < 1e4; i++) { keep.push({ i, s: 'x' + i }); if (keep.length > 20000) keep = []; }
  }
  keep = [];
  const grown = young();
  gc({ type: 'minor' });
  let big = [];
  for (let i = 0; i < 40; i++) big.push(new Array(100000).fill(i));
  big = null;
  let junk;
  for (let i = 0; i < 150000; i++) junk = { i, a: [i, i], s: 'y' + i };
  const reclaims = async () => (await registry.getSingleMetric('zmesh_memory_reclaims_total').get()).values[0]?.value ?? 0;
  const peak = young();
  const quiet = Date.now();
  while ((await reclaims()) === 0 && Date.now() - quiet < 20000) await sleep(100);
  reclaim.stop();
  console.log(JSON.stringify({ grown, peak, after: young(), ms: Date.now() - quiet, last: junk.i }));
`;

async function youngAfterReclaim(
  mode: 'default' | 'no-scavenge',
): Promise<{ grown: number; peak: number; after: number; ms: number }> {
  const module = new URL('./idle-reclaim.js', import.meta.url).href;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--expose-gc', '--input-type=module', '-e', BUSY_THEN_QUIET, module, mode],
    { timeout: 30_000 },
  );
  return JSON.parse(stdout) as { grown: number; peak: number; after: number; ms: number };
}

/**
 * On Node 24 the quiet's one young collection was not enough: V8 13 smooths its allocation
 * rate over several collections and shrinks new space at a full collection only once that
 * rate reads low, so the reclaim kept all 64 MB one run in three or four (CI run of
 * 2026-12-04; 4 of 24 on 2026-12-05, loaded). Each quiet sample now runs a young
 * collection, feeding V8 low-rate samples: 24 of 24 in the same run (docs/performance.md,
 * "Node 20 vs Node 24").
 */
test('the reclaim gives the young generation back: each quiet sample runs a young collection', async (t) => {
  const [reclaimed, unscavenged] = await Promise.all([
    youngAfterReclaim('default'),
    youngAfterReclaim('no-scavenge'),
  ]);
  const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MB`;
  t.log(
    `young generation ${mb(reclaimed.grown)}, ${mb(reclaimed.peak)} when quiet → ${mb(reclaimed.after)} after ${reclaimed.ms} ms; without the young collection ${mb(unscavenged.after)}`,
  );
  t.true(reclaimed.grown >= 16 * 2 ** 20, `the busy second grew it: ${mb(reclaimed.grown)}`);
  t.true(reclaimed.after <= 2 * 2 ** 20, `the reclaim shrank it: ${mb(reclaimed.after)}`);
  // The run without young collections is logged, not asserted: on Node 20 its reclaim kept
  // the young generation every time; Node 24's V8 smooths its allocation rate, and at 7.5 s
  // it sometimes gave it back even so (1 of 3 runs on a loaded machine).
});
