import type { Service, Workload } from '@zmesh/shared';
import test from 'ava';
import type { CompiledConfig } from './compiler.js';
import { WaypointHold, waypointName } from './waypoint-hold.js';

const ref = (name: string) => ({
  hostname: { namespace: 'shop', hostname: `${name}.shop.svc.cluster.local` },
  hbonePort: 15008,
});
const config = (waypoint?: string): CompiledConfig =>
  ({
    workloads: [
      { uid: 'u1', name: 'web', namespace: 'shop', ...(waypoint ? { waypoint: ref(waypoint) } : {}) },
    ] as unknown as Workload[],
    services: [
      { name: 'web', namespace: 'shop', hostname: 'web.shop.svc.cluster.local' },
    ] as unknown as Service[],
    authorizations: [],
  }) as CompiledConfig;
const bindings = (c: CompiledConfig) => c.workloads.map((w) => waypointName(w.waypoint));

test('first serve is as compiled; a new binding to a not-ready waypoint keeps the last one until it is ready', (t) => {
  const hold = new WaypointHold();
  const none = () => false;
  t.deepEqual(bindings(hold.serve(config('wp1'), none)), ['shop/wp1'], 'nothing served before: as compiled');
  t.deepEqual(hold.held, []);
  // wp1 → wp2 while wp2 is not ready: stays on wp1 (even though wp1 is not ready either).
  const wp2 = config('wp2');
  const held = hold.serve(wp2, none);
  t.deepEqual(bindings(held), ['shop/wp1']);
  t.deepEqual(hold.held, [{ object: 'Pod/shop/web', waypoint: 'shop/wp2', keptOn: 'shop/wp1' }]);
  t.is(hold.serve(wp2, none).workloads[0], held.workloads[0], 'same copy: deterministic and memoised');
  t.deepEqual(
    bindings(hold.serve(config('wp2'), (w) => w === 'shop/wp2')),
    ['shop/wp2'],
    'switches once ready',
  );
  t.deepEqual(hold.held, []);
  t.deepEqual(
    bindings(hold.serve(config('wp2'), none)),
    ['shop/wp2'],
    'a disconnect later never goes around it',
  );
  t.deepEqual(bindings(hold.serve(config(), none)), [undefined], 'unbinding is served at once');
  t.deepEqual(bindings(hold.serve(config('wp2'), none)), [undefined], 'rebinding waits again, direct');
  t.deepEqual(hold.held, [{ object: 'Pod/shop/web', waypoint: 'shop/wp2', keptOn: undefined }]);
});
