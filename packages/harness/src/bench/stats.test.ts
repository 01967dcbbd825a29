import test from 'ava';
import { lowerMedianBy, median, quantile, upperMedianBy } from './stats.js';

test('quantile is the nearest rank below, NaN when empty', (t) => {
  const sorted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  t.is(quantile(sorted, 0.5), 6);
  t.is(quantile(sorted, 0.99), 10);
  t.is(quantile(sorted, 0), 1);
  t.is(quantile(sorted, 1), 10);
  t.true(Number.isNaN(quantile([], 0.5)));
});

test('child programs embed quantile as source and get the same answers', (t) => {
  const embedded = new Function(`return (${quantile});`)() as typeof quantile;
  t.is(embedded([3, 5, 8], 0.5), quantile([3, 5, 8], 0.5));
  t.is(JSON.stringify({ p: embedded([], 0.99) }), '{"p":null}');
});

test('median averages the two middles; the upper and lower medians pick one', (t) => {
  t.is(median([1, 2, 3]), 2);
  t.is(median([1, 2, 3, 10]), 2.5);
  const rows = [{ v: 4 }, { v: 1 }, { v: 3 }, { v: 2 }];
  t.is(upperMedianBy(rows, (r) => r.v).v, 3);
  t.is(lowerMedianBy(rows, (r) => r.v).v, 2);
  t.is(upperMedianBy([{ v: 7 }], (r) => r.v).v, 7);
});
