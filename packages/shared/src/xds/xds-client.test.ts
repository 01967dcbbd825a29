import test from 'ava';
import fc from 'fast-check';
import { decodeAddress, decodeAuthorization } from './codec.js';
import { backoffDelay } from './xds-client.js';

test('backoff grows exponentially, is jittered within [base/2, base] and capped at maxMs', (t) => {
  const b = { initialMs: 100, maxMs: 5000 };
  t.is(
    backoffDelay(0, b, () => 0),
    50,
  );
  t.is(
    backoffDelay(0, b, () => 1),
    100,
  );
  t.is(
    backoffDelay(3, b, () => 0),
    400,
  );
  t.is(
    backoffDelay(10, b, () => 1),
    5000,
  );
  t.is(
    backoffDelay(10_000, b, () => 0),
    2500,
  );
});

test('decoding arbitrary bytes never throws: it returns a value or reasons', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
      const a = decodeAddress(bytes);
      const p = decodeAuthorization(bytes);
      return (a.ok || a.error.length > 0) && (p.ok || p.error.length > 0);
    }),
    { numRuns: 2000 },
  );
  t.pass();
});
