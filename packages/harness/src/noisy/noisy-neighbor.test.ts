import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { runNoisyNeighbor, SCENARIOS } from './noisy-neighbor.js';
import { table, verdictOf } from './noisy-report.js';

const unavailable = await BpfCapture.unavailableReason();

/**
 * The --quick noisy-neighbor run in CI. Bounds are generous (2-core CI machine, ratios
 * from the same run); the full verdict is printed, not asserted: issue 8's targets are
 * reported in the closing note, and today flood/slow/hoard miss them (see the note).
 */
(unavailable ? test.skip : test)(
  unavailable
    ? `noisy-neighbor --quick skipped: ${unavailable}`
    : 'noisy-neighbor --quick: every scenario measured, fairness on keeps the victim served',
  async (t) => {
    const { scenarios, capacityRps } = await runNoisyNeighbor({ quick: true, progress: (l) => t.log(l) });
    t.log(`\n${table(scenarios)}`);
    t.log(JSON.stringify(verdictOf(scenarios)));
    t.true(capacityRps > 0);
    t.is(scenarios.length, SCENARIOS.length * 2);
    for (const s of scenarios)
      t.true(s.victim.loaded.rps > 0, `${s.name}/${s.fairness}: victim got no answers`);
    for (const s of scenarios.filter((x) => x.fairness === 'on')) {
      t.true(s.rps_ratio >= 0.8, `${s.name}: victim throughput ${s.rps_ratio.toFixed(2)}× solo`);
    }
    const storm = scenarios.find((s) => s.fairness === 'on' && s.name === 'storm')!;
    t.true(storm.p99_ratio <= 3, `storm with fairness on: victim p99 ${storm.p99_ratio.toFixed(2)}× solo`);
  },
);
