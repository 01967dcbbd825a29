import test from 'ava';
import type { CompiledConfig } from './compiler.js';
import { EventLog, MAX_EVENTS, objectOf } from './events.js';

test('a refusal is put on the object its reason names, in each form the store writes', (t) => {
  t.is(
    objectOf('a.yaml#2 (Pod shop/web): status.podIPs: 1.2.3.4 is also the IP of Pod shop/db'),
    'Pod/shop/web',
  );
  t.is(objectOf('apply#0 (Namespace /shop): metadata.labels: bad'), 'Namespace//shop');
  t.is(objectOf('AuthorizationPolicy shop/deny: spec.action: bad'), 'AuthorizationPolicy/shop/deny');
  t.is(objectOf('Namespace shop: bad'), 'Namespace//shop');
  t.is(objectOf('Pod/shop/web: not found'), 'Pod/shop/web');
  t.is(objectOf('mesh.yaml#0: Nested mappings are not allowed'), undefined);
  t.is(objectOf('Frob shop/web: nothing'), undefined);
});

test('refusals and waypoint bindings become events; the log is bounded', (t) => {
  const log = new EventLog();
  log.refused(
    ['apply#0 (AuthorizationPolicy shop/deny): spec.rules[0].from: bad', 'apply#1: junk'],
    'apply',
    0,
  );
  const wp = {
    hostname: { namespace: 'shop', hostname: 'waypoint.shop.svc.cluster.local' },
    hbonePort: 15008,
  };
  const compiled = (waypoint?: typeof wp) =>
    ({
      workloads: [{ name: 'web', namespace: 'shop', ...(waypoint ? { waypoint } : {}) }],
      services: [],
      authorizations: [],
    }) as unknown as CompiledConfig;
  log.compiled(undefined, compiled(), 1000);
  log.compiled(compiled(), compiled(wp), 2000);
  log.compiled(compiled(wp), compiled(), 3000);
  t.deepEqual(log.list('AuthorizationPolicy/shop/deny'), [
    {
      time: '1970-01-01T00:00:00.000Z',
      type: 'Warning',
      reason: 'Refused',
      object: 'AuthorizationPolicy/shop/deny',
      from: 'apply',
      message: 'apply#0 (AuthorizationPolicy shop/deny): spec.rules[0].from: bad',
    },
  ]);
  t.deepEqual(
    log.list('Pod/shop/web').map((e) => [e.reason, e.message]),
    [
      ['WaypointBound', 'uses waypoint shop/waypoint'],
      ['WaypointUnbound', 'no longer uses waypoint shop/waypoint'],
    ],
  );
  t.is(log.list().length, 4);
  for (let i = 0; i < MAX_EVENTS + 5; i++) log.refused(['x'], 'apply');
  t.is(log.list().length, MAX_EVENTS);
});
