import test from 'ava';
import type { Service, Workload } from '../model/workload.js';
import type { DecodedAddress } from './address-codec.js';
import { type AcceptedState, advanceSnapshot, buildSnapshot, EMPTY_STATE } from './config-snapshot.js';
import { ADDRESS_TYPE_URL } from './proto-root.js';

const wp = { hostname: { namespace: 'ns', hostname: 'wp.ns.svc.cluster.local' }, hbonePort: 15008 };
const workload = (uid: string, waypoint?: typeof wp): DecodedAddress => ({
  kind: 'workload',
  workload: { uid, ...(waypoint ? { waypoint } : {}) } as Workload,
});
const service = (name: string): DecodedAddress => ({
  kind: 'service',
  service: { name, namespace: 'ns', hostname: `${name}.ns.svc.cluster.local` } as Service,
});

function step(
  state: AcceptedState,
  set: Record<string, DecodedAddress>,
  removed: string[] = [],
): AcceptedState {
  const addresses = new Map(state.addresses);
  for (const n of removed) addresses.delete(n);
  for (const [n, value] of Object.entries(set))
    addresses.set(n, { version: n, value, bytes: new Uint8Array() });
  return { ...state, addresses };
}

test('advancing a snapshot gives exactly what a full rebuild gives, through pending and resolution', (t) => {
  const steps: Array<[Record<string, DecodedAddress>, string[]]> = [
    [{ a: workload('a'), b: workload('b', wp) }, []],
    [{ c: workload('c', wp) }, []],
    [{ 'ns/wp.ns.svc.cluster.local': service('wp') }, []],
    [{ a: workload('a', wp) }, ['c']],
    [{}, ['ns/wp.ns.svc.cluster.local']],
    [{ b: workload('b') }, []],
  ];
  let state = EMPTY_STATE;
  let snap = buildSnapshot(state, 0);
  for (const [set, removed] of steps) {
    state = step(state, set, removed);
    snap = advanceSnapshot(snap, state, ADDRESS_TYPE_URL, Object.keys(set), removed, 0);
    const full = buildSnapshot(state, 0);
    t.deepEqual([...snap.workloads.keys()].sort(), [...full.workloads.keys()].sort());
    t.deepEqual([...snap.services.keys()].sort(), [...full.services.keys()].sort());
    t.deepEqual(snap.pending, full.pending);
    t.deepEqual(snap.versions, full.versions);
  }
  t.deepEqual(snap.pending, [{ name: 'a', missing: ['ns/wp.ns.svc.cluster.local'] }]);
  t.deepEqual([...snap.workloads.keys()].sort(), ['b']);
});
