import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import test from 'ava';
import { bidirectionalCopy } from './bidirectional-copy.js';

test('a downstream closed before the copy began ends the upstream (no leaked upstream)', async (t) => {
  const downstream = new PassThrough();
  downstream.destroy();
  await once(downstream, 'close');
  const upstream = new PassThrough();
  const result = await bidirectionalCopy(downstream, upstream);
  t.truthy(result.error);
  t.true(upstream.destroyed);
});

test('an upstream destroyed before the copy began ends the downstream', async (t) => {
  const downstream = new PassThrough();
  const upstream = new PassThrough();
  upstream.destroy();
  const result = await bidirectionalCopy(downstream, upstream);
  t.truthy(result.error);
  t.true(downstream.destroyed);
});
