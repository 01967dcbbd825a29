import test from 'ava';
import { type CachedResource, MAX_JOURNAL_VERSIONS, ResourceCache } from './resource-cache.js';

const T = 'type.googleapis.com/x';
const r = (name: string, version: string): CachedResource => ({
  name,
  version,
  payloadType: T,
  bytes: new Uint8Array(),
  rank: 0,
});

test('replace bumps the version only on change and journals changed and removed names', (t) => {
  const cache = new ResourceCache();
  t.true(cache.replace(T, [r('a', '1'), r('b', '1')]));
  t.false(cache.replace(T, [r('a', '1'), r('b', '1')]));
  t.is(cache.view(T).version, 1);
  t.true(cache.replace(T, [r('a', '2')]));
  t.deepEqual(cache.changesSince(T, 1)?.sort(), ['a', 'b']);
  t.deepEqual(cache.changesSince(T, 0)?.sort(), ['a', 'b']);
  t.deepEqual(cache.changesSince(T, 2), []);
});

test('a proxy further behind than the journal gets undefined (a full diff)', (t) => {
  const cache = new ResourceCache();
  for (let i = 0; i <= MAX_JOURNAL_VERSIONS + 1; i++) cache.replace(T, [r('a', String(i))]);
  t.is(cache.changesSince(T, 0), undefined);
  t.deepEqual(cache.changesSince(T, cache.view(T).version - 1), ['a']);
});
