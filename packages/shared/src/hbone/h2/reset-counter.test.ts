import test from 'ava';
import { DEFAULT_FLOOD_LIMITS, PREMATURE_RESET_LIFETIME_MS } from './flood-limits.js';
import { isPrematureReset, PrematureResets } from './reset-counter.js';

test('a reset is premature only while the stream is unanswered and under a second old (Envoy)', (t) => {
  const opened = 1_000_000;
  t.true(isPrematureReset(false, opened, opened));
  t.true(isPrematureReset(false, opened, opened + PREMATURE_RESET_LIFETIME_MS));
  t.false(isPrematureReset(false, opened, opened + PREMATURE_RESET_LIFETIME_MS + 1));
  t.false(isPrematureReset(true, opened, opened));
});

test('premature resets breach the window bound on the one after the limit', (t) => {
  const r = new PrematureResets(DEFAULT_FLOOD_LIMITS);
  const now = 5_000;
  for (let i = 0; i < DEFAULT_FLOOD_LIMITS.resets; i++) {
    t.is(r.reset(now), undefined);
    r.streamEnded();
  }
  const breach = r.reset(now);
  t.is(breach?.code, 'ZM_ERR_HBONE_RAPID_RESET');
  t.regex(breach?.message ?? '', /within 1000 ms/);
});

test('premature resets spread under the window bound breach Envoy ratio: half of 500 before 500 ended', (t) => {
  const r = new PrematureResets(DEFAULT_FLOOD_LIMITS);
  // 50 a second: never over the window's 100, yet every stream is reset prematurely.
  let breachAt = 0;
  for (let i = 1; i <= 300 && breachAt === 0; i++) {
    if (r.reset(i * 20) !== undefined) breachAt = i;
    r.streamEnded();
  }
  t.is(breachAt, DEFAULT_FLOOD_LIMITS.prematureResetStreams / 2);
  // Streams that ended normally dilute the ratio: one premature reset in three never breaches.
  const diluted = new PrematureResets(DEFAULT_FLOOD_LIMITS);
  for (let i = 1; i <= 3000; i++) {
    if (i % 3 === 0) t.is(diluted.reset(i * 20), undefined);
    diluted.streamEnded();
  }
});
