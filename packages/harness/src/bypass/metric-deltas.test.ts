import test from 'ava';
import { describeMovement, moved, movements, parseScrape } from './metric-deltas.js';

const before = parseScrape(`
# HELP zmesh_errors_total errors
zmesh_errors_total{code="ZM_ERR_AUTHZ_DENIED",flag="UAEX"} 1
zmesh_cert_seconds_to_earliest_expiry 86000
process_cpu_seconds_total 3
zmesh_capture_inbound_drops{pod="p"} 5
`);

test('only data-path series count; time gauges and runtime series are left out', (t) => {
  t.deepEqual(
    [...before.keys()],
    ['zmesh_errors_total{code="ZM_ERR_AUTHZ_DENIED",flag="UAEX"}', 'zmesh_capture_inbound_drops{pod="p"}'],
  );
});

test('movements: new series, increases, and a reset counter (restart) counts its whole value', (t) => {
  const after = parseScrape(`
zmesh_errors_total{code="ZM_ERR_AUTHZ_DENIED",flag="UAEX"} 3
zmesh_capture_inbound_drops{pod="p"} 2
zmesh_authz_decisions_total{decision="deny",reason="x"} 1
`);
  const m = movements('node-b', before, after);
  t.is(m[0]!.series, 'zmesh_capture_inbound_drops{pod="p"}', 'decisive series first');
  t.is(m[0]!.delta, 2, 'reset: went from 5 to 2, so 2 are new');
  t.is(moved(m, 'zmesh_errors_total', 'AUTHZ_DENIED'), 2);
  t.is(moved(m, 'zmesh_authz_decisions_total', 'decision="deny"'), 1);
  t.is(moved(m, 'zmesh_errors_total', 'nothing-like-this'), 0);
  t.is(describeMovement(m[0]!), 'node-b zmesh_capture_inbound_drops{pod="p"} +2');
});
