import test from 'ava';
import { combine, judgeHbone, judgePrivileges, judgeProbes, worst } from './judge.js';

test('any answer from a forbidden target is a delivery, whatever else happened', (t) => {
  const r = judgeProbes(
    [
      { target: 'a', answer: '', error: 'TIMEOUT' },
      { target: 'b', answer: '10.244.1.2', error: null },
    ],
    [],
  );
  t.is(r.observed, 'delivered');
});

test('no answer: captured when the source ztunnel counted it, denied otherwise', (t) => {
  const none = [{ target: 'a', answer: '', error: 'ECONNRESET', connected: true }];
  const seen = [{ node: 'node-a', series: 'zmesh_capture_refused_total{reason="pending_config"}', delta: 1 }];
  t.is(judgeProbes(none, seen, 'node-a').observed, 'captured');
  t.is(judgeProbes(none, seen, 'node-b').observed, 'denied');
  t.is(judgeProbes(none, []).observed, 'denied');
});

test('an accepted tunnel is a delivery even if nothing came back; a refusal is a denial', (t) => {
  t.is(judgeHbone('x', { stage: 'response', status: 200 }).observed, 'delivered');
  t.is(
    judgeHbone('x', { stage: 'response', status: 401, zmeshError: 'ZM_ERR_AUTHZ_DENIED' }).observed,
    'denied',
  );
  t.is(judgeHbone('x', { stage: 'tls', error: 'ECONNRESET' }).observed, 'denied');
});

test('a privilege the pod must not have, granted, is a delivery; informational checks never are', (t) => {
  const info = { check: 'own_cgroup', ok: true, errno: null, detail: '0::/pods/x' };
  const refused = { check: 'so_mark', ok: false, errno: 'EPERM', detail: '' };
  t.is(judgePrivileges([info, refused], () => true).observed, 'denied');
  t.is(judgePrivileges([{ ...refused, ok: true }], () => true).observed, 'delivered');
});

test('the worst part decides a combined attempt; error outranks everything but delivery', (t) => {
  t.is(worst('denied', 'captured'), 'captured');
  t.is(worst('denied', 'error', 'exempt'), 'error');
  t.is(
    combine({ observed: 'denied', evidence: ['a'] }, { observed: 'delivered', evidence: ['b'] }).observed,
    'delivered',
  );
});
