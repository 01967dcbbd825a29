import test from 'ava';
import { Cancel } from './cancel.js';

test('cancel calls each listener once, in order, and only the first cancel counts', (t) => {
  const c = new Cancel();
  const calls: string[] = [];
  c.onCancel(() => calls.push('a'));
  c.onCancel(() => calls.push('b'));
  t.false(c.cancelled);
  c.cancel();
  c.cancel();
  t.true(c.cancelled);
  t.deepEqual(calls, ['a', 'b']);
});

test('a listener taken off is not called; others still are', (t) => {
  const c = new Cancel();
  const calls: string[] = [];
  const off = c.onCancel(() => calls.push('a'));
  c.onCancel(() => calls.push('b'));
  off();
  off();
  c.cancel();
  t.deepEqual(calls, ['b']);
});

test('a listener added after cancel runs at once (an attempt that starts after the client left stops)', (t) => {
  const c = new Cancel();
  c.cancel();
  let called = 0;
  const off = c.onCancel(() => called++);
  t.is(called, 1);
  off();
  c.cancel();
  t.is(called, 1);
});

test('cancel chains: a request going away cancels its attempt', (t) => {
  const request = new Cancel();
  const attempt = new Cancel();
  request.onCancel(() => attempt.cancel());
  let stopped = false;
  attempt.onCancel(() => {
    stopped = true;
  });
  request.cancel();
  t.true(attempt.cancelled);
  t.true(stopped);
});
