import test from 'ava';
import { AttemptRates } from './attempt-rates.js';

test('a steady rate reads about its events per second; the fastest other tenant is reported', (t) => {
  let now = 0;
  const rates = new AttemptRates(() => now);
  let storm = { rate: 0, fastestOther: 0 };
  for (let i = 0; i < 2000; i++) {
    now += 2; // 500/s
    storm = rates.record('storm');
    if (i % 20 === 0) rates.record('victim'); // 25/s
  }
  t.true(storm.rate > 450 && storm.rate < 520, `storm ${storm.rate.toFixed(0)}/s`);
  t.true(storm.fastestOther > 15 && storm.fastestOther < 35, `victim ${storm.fastestOther.toFixed(0)}/s`);
  const victim = rates.record('victim');
  t.true(victim.fastestOther > 450, 'the victim sees the storm as the fastest other');
});

test('quiet tenants decay and are forgotten', (t) => {
  let now = 0;
  const rates = new AttemptRates(() => now);
  for (let i = 0; i < 100; i++) rates.record(`t${i}`);
  now += 10_000;
  t.is(rates.record('late').fastestOther, 0);
  t.is(rates.size, 1, 'only the tenant just seen remains');
});
