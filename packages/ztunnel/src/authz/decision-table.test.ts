import test from 'ava';
import { DECISION_TABLE, TABLE_ROOT_NAMESPACE } from '../testing/decision-table.js';
import { AuthorizationStore } from './authorization-store.js';

test('the decision table has at least 40 cases with unique names', (t) => {
  t.true(DECISION_TABLE.length >= 40, `${DECISION_TABLE.length} cases`);
  t.is(new Set(DECISION_TABLE.map((c) => c.name)).size, DECISION_TABLE.length);
});

for (const c of DECISION_TABLE) {
  test(`decision table: ${c.name}`, (t) => {
    const store = new AuthorizationStore({ rootNamespace: TABLE_ROOT_NAMESPACE });
    const applied = store.apply(c.policies, []);
    t.true(applied.ok, JSON.stringify(applied));
    const d = store.evaluate(
      {
        sourceIp: c.source.ip,
        destinationIp: c.destination.ip,
        destinationPort: c.destination.port,
        ...(c.source.principal === undefined ? {} : { sourcePrincipal: c.source.principal }),
      },
      c.destination,
    );
    t.is(d.allowed, c.expect === 'allow');
    t.is(d.reason, c.reason);
    t.is(d.policy, c.policy);
  });
}
