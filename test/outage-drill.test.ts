import { sqliteAvailable } from '@zmesh/control-plane';
import { promtoolPath, runOutageDrill, timelineTable, verdictLine } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';

/**
 * The CI-sized control-plane outage drill (`zmesh harness outage`, docs/design.md §8) on the local
 * cluster: needs root, BPF (capture) and promtool (the alert check evaluates the shipped rule).
 */
const unavailable =
  (await BpfCapture.unavailableReason()) ?? (promtoolPath() ? undefined : 'promtool not on PATH');
const drillTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`outage drill skipped: ${unavailable}`, () => {});

drillTest(
  'outage drill: every check passes (serve through the outage, fail closed at expiry, converge)',
  async (t) => {
    t.timeout(200_000);
    let report = await runOutageDrill({ certTtlSeconds: 16, durationSeconds: 19 });
    // The one wall-clock budget (a restart with persisted keys serving within 2 s) can be
    // missed on a loaded 2-core machine; that single check earns one rerun of the whole
    // drill, logged, and the rerun must pass every check.
    const failed = report.checks.filter((c) => !c.passed);
    if (failed.length === 1 && failed[0]!.name.startsWith('restart with persisted keys')) {
      t.log(`first run missed only the restart budget (${failed[0]!.evidence}); running the drill once more`);
      report = await runOutageDrill({ certTtlSeconds: 16, durationSeconds: 19 });
    }
    t.log(`\n${timelineTable(report.timeline)}`);
    for (const c of report.checks) t.true(c.passed, `${c.name}: ${c.evidence}`);
    // Two more when the control plane has a state dir (node:sqlite): the restart phase.
    t.is(report.checks.length, sqliteAvailable() ? 14 : 12);
    t.log(verdictLine(report.checks));
  },
);
