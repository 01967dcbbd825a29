import type { Service, Workload } from '@zmesh/shared';
import test from 'ava';
import type { CompiledConfig } from './compiler.js';
import type { Bindings } from './store/state-store.js';
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

/** A hold whose last-served bindings are kept the way the store keeps them. */
function served(last: Bindings = new Map(), onUnreadable?: () => void) {
  const hold = new WaypointHold(onUnreadable);
  const s = {
    hold,
    last,
    serve(c: CompiledConfig, ready: (w: string) => boolean): CompiledConfig {
      const d = hold.decide(c, ready, s.last);
      hold.served(d);
      s.last = d.bindings;
      return d.config;
    },
  };
  return s;
}

test('first serve is as compiled; a new binding to a not-ready waypoint keeps the last one until it is ready', (t) => {
  const { hold, ...s } = served();
  const none = () => false;
  t.deepEqual(bindings(s.serve(config('wp1'), none)), ['shop/wp1'], 'nothing served before: as compiled');
  t.deepEqual(hold.held, []);
  // wp1 → wp2 while wp2 is not ready: stays on wp1 (even though wp1 is not ready either).
  const wp2 = config('wp2');
  const held = s.serve(wp2, none);
  t.deepEqual(bindings(held), ['shop/wp1']);
  t.deepEqual(hold.held, [{ object: 'Pod/shop/web', waypoint: 'shop/wp2', keptOn: 'shop/wp1' }]);
  t.is(s.serve(wp2, none).workloads[0], held.workloads[0], 'same copy: deterministic and memoised');
  t.deepEqual(bindings(s.serve(config('wp2'), (w) => w === 'shop/wp2')), ['shop/wp2'], 'switches once ready');
  t.deepEqual(hold.held, []);
  t.deepEqual(
    bindings(s.serve(config('wp2'), none)),
    ['shop/wp2'],
    'a disconnect later never goes around it',
  );
  t.deepEqual(bindings(s.serve(config(), none)), [undefined], 'unbinding is served at once');
  t.deepEqual(bindings(s.serve(config('wp2'), none)), [undefined], 'rebinding waits again, direct');
  t.deepEqual(hold.held, [{ object: 'Pod/shop/web', waypoint: 'shop/wp2', keptOn: undefined }]);
});

test("the decision is the stored bindings': a hold that never served (a restart, another replica) decides the same", (t) => {
  const none = () => false;
  const first = served();
  first.serve(config('wp1'), none);
  first.serve(config('wp2'), none);
  t.deepEqual([...first.last.keys()], ['shop/w/u1', 'shop/s/web.shop.svc.cluster.local']);
  // Only the bindings cross: wp1 is named by no compiled object now, its reference comes from the store.
  const restarted = served(new Map(first.last));
  t.deepEqual(bindings(restarted.serve(config('wp2'), none)), ['shop/wp1'], 'still held on wp1');
  t.deepEqual(restarted.hold.held, [{ object: 'Pod/shop/web', waypoint: 'shop/wp2', keptOn: 'shop/wp1' }]);
  t.deepEqual(restarted.serve(config('wp2'), none).workloads[0]?.waypoint, ref('wp1'));
  t.deepEqual(bindings(restarted.serve(config('wp2'), (w) => w === 'shop/wp2')), ['shop/wp2']);
  // Released once: a hold starting from that never goes around wp2, ready or not.
  t.deepEqual(bindings(served(new Map(restarted.last)).serve(config('wp2'), none)), ['shop/wp2']);
  // Nothing stored for it: served as compiled (a new pod).
  t.deepEqual(bindings(served().serve(config('wp2'), none)), ['shop/wp2']);
});

test('a stored binding that is not a waypoint reference is served as compiled, never as direct', (t) => {
  let counted = 0;
  const garbage = served(new Map([['shop/w/u1', '{"hbonePort":"x"}']]), () => counted++);
  t.deepEqual(bindings(garbage.serve(config('wp2'), () => false)), ['shop/wp2']);
  t.deepEqual(garbage.hold.held, []);
  t.is(counted, 1);
  t.deepEqual(bindings(garbage.serve(config('wp2'), () => false)), ['shop/wp2']);
  t.is(counted, 1, 'what it served replaced the text');
  const direct = served(new Map([['shop/w/u1', '']]));
  t.deepEqual(
    bindings(direct.serve(config('wp2'), () => false)),
    [undefined],
    'an empty one is direct: held',
  );
});
