import test from 'ava';
import { decodeWaypointResource, encodeWaypointResource } from './waypoint-resource.js';

test('a waypoint config round-trips through its BytesValue-shaped wire form', (t) => {
  const config = { waypoint: { name: 'wp', namespace: 'shop' }, services: [{ name: 'x'.repeat(300) }] };
  const bytes = encodeWaypointResource(config);
  t.is(bytes[0], 0x0a);
  t.deepEqual(decodeWaypointResource(bytes), { ok: true, value: config });
});

test('a damaged waypoint resource is refused with a reason, never thrown', (t) => {
  const bytes = encodeWaypointResource({ a: 1 });
  t.false(decodeWaypointResource(bytes.subarray(0, bytes.length - 1)).ok);
  t.false(decodeWaypointResource(Uint8Array.from([0x12, 0])).ok);
  const notJson = Uint8Array.from([0x0a, 2, 0x7b, 0x7b]);
  const r = decodeWaypointResource(notJson);
  t.false(r.ok);
  if (!r.ok) t.regex(r.error[0]!, /^json:/);
});
