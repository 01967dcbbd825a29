import test from 'ava';
import { Pings } from './pings.js';

test('an ACK answers its own ping; unknown ACKs are ignored', (t) => {
  const pings = new Pings();
  const got: (string | null)[] = [];
  const a = pings.start((e) => got.push(e ? e.message : 'a'))!;
  const b = pings.start((e) => got.push(e ? e.message : 'b'))!;
  pings.acked(b.subarray(9));
  pings.acked(Buffer.alloc(8, 0xff));
  pings.acked(a.subarray(9));
  pings.acked(a.subarray(9)); // answered already
  t.deepEqual(got, ['b', 'a']);
});

test('at most 16 pings wait at once; the connection’s end fails every one', (t) => {
  const pings = new Pings();
  const errors: string[] = [];
  for (let i = 0; i < 16; i++) t.truthy(pings.start((e) => errors.push(e?.message ?? 'answered')));
  t.is(
    pings.start(() => {}),
    undefined,
  );
  pings.failAll(new Error('connection closed'));
  t.is(errors.length, 16);
  t.true(errors.every((m) => m === 'connection closed'));
  t.truthy(
    pings.start(() => {}),
    'room again once they are gone',
  );
});
