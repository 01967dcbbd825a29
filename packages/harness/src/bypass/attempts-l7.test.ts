import test from 'ava';
import { judgeL7, l7Attempts } from './attempts-l7.js';
import type { BypassLab } from './bypass-lab.js';
import { forbidden, L7Target, servedPath } from './l7-target.js';

test('the judge reads a path as a normalizing app would', (t) => {
  const cases: Array<[string, string]> = [
    ['/admin', '/admin'],
    ['/public/../admin', '/admin'],
    ['/public/%2e%2e/admin', '/admin'],
    ['/%61dmin', '/admin'],
    ['/public\\..\\admin', '/admin'],
    ['/public/..;/admin', '/admin'],
    ['http://evil.example/admin', '/admin'],
    ['/public?x=/admin', '/public'],
    ['/public/%zz', '/public/%zz'],
  ];
  for (const [url, want] of cases) t.is(servedPath(url), want, url);
  t.true(forbidden('deny', '/public/../admin'));
  t.false(forbidden('deny', '/public/x'));
  t.true(forbidden('allow', '/other'));
  t.false(forbidden('allow', '/public/x'));
});

test('an app that received a forbidden request is a delivery; no answer at all proves nothing', (t) => {
  const rec = (url: string) => ({ method: 'GET', url, headers: {}, body: '' });
  t.is(
    judgeL7('deny', { statuses: [200, 200], received: [rec('/public'), rec('/admin')] }).observed,
    'delivered',
  );
  t.is(judgeL7('deny', { statuses: [200, 403], received: [rec('/public')] }).observed, 'denied');
  t.is(judgeL7('allow', { statuses: [], received: [] }).observed, 'error');
});

test('the L7 attempts, through real control-plane, ztunnel and waypoint processes: none delivered', async (t) => {
  t.timeout(120_000);
  const target = await L7Target.up();
  try {
    const lab = { l7: async () => target } as unknown as BypassLab;
    const attempts = l7Attempts();
    t.true(attempts.length >= 28, `${attempts.length} attempts`);
    for (const a of attempts) {
      const o = await a.run(lab);
      t.is(o.observed, 'denied', `${a.id}: ${o.evidence.join(' | ')}`);
    }
  } finally {
    await target.down();
  }
});
