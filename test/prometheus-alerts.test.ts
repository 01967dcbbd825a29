import { ALERT_RULES_FILE, ALERT_TESTS_FILE, promtoolPath, promtoolTestRules } from '@zmesh/harness';
import test from 'ava';
import { execa } from 'execa';

/** The shipped alert rules (deploy/prometheus) pass their promtool unit tests. */
const promtool = promtoolPath();
const promtoolTest = promtool ? test : test.skip;
if (!promtool)
  test.skip('alert rule tests skipped: promtool not on PATH (apt-get install prometheus)', () => {});

promtoolTest('zmesh-alerts.yaml is valid Prometheus rules', async (t) => {
  const r = await execa(promtool!, ['check', 'rules', ALERT_RULES_FILE], { reject: false });
  t.is(r.exitCode, 0, r.stdout + r.stderr);
});

promtoolTest('promtool test rules: xDS disconnected, NACKs, certificate horizon and expiry', async (t) => {
  const r = await promtoolTestRules(ALERT_TESTS_FILE);
  t.true(r.passed, r.output);
});
