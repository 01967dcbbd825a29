import { promtoolPath, runOutageDrill, timelineTable, verdictLine } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';

/**
 * The CI-sized control-plane outage drill (`zmesh harness outage`, DESIGN §8) on the local
 * cluster: needs root, BPF (capture) and promtool (the alert check evaluates the shipped rule).
 */
const unavailable =
  (await BpfCapture.unavailableReason()) ?? (promtoolPath() ? undefined : 'promtool not on PATH');
const drillTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`outage drill skipped: ${unavailable}`, () => {});

drillTest(
  'outage drill: every check passes (serve through the outage, fail closed at expiry, converge)',
  async (t) => {
    t.timeout(110_000);
    const report = await runOutageDrill({ certTtlSeconds: 12, durationSeconds: 15 });
    t.log(`\n${timelineTable(report.timeline)}`);
    for (const c of report.checks) t.true(c.passed, `${c.name}: ${c.evidence}`);
    t.is(report.checks.length, 12);
    t.log(verdictLine(report.checks));
  },
);
