import test from 'ava';
import type { RouteMatch } from '../config/waypoint-config.js';
import { applyHeaderModifier, modifyPath, redirectLocation } from './route-filters.js';

const prefix = (value: string): RouteMatch => ({ path: { type: 'PathPrefix', value }, headers: [] });

test('ReplacePrefixMatch follows the Gateway API HTTPPathModifier table', (t) => {
  const cases: Array<[string, string, string, string]> = [
    ['/foo/bar', '/foo', '/xyz', '/xyz/bar'],
    ['/foo/bar', '/foo', '/xyz/', '/xyz/bar'],
    ['/foo/bar', '/foo/', '/xyz', '/xyz/bar'],
    ['/foo/bar', '/foo/', '/xyz/', '/xyz/bar'],
    ['/foo', '/foo', '/xyz', '/xyz'],
    ['/foo/', '/foo', '/xyz', '/xyz/'],
    ['/foo/bar', '/foo', '/', '/bar'],
    ['/foo/', '/foo', '/', '/'],
    ['/foo', '/foo', '/', '/'],
    ['/a/b', '/', '/x', '/x/a/b'],
  ];
  for (const [path, match, replace, want] of cases)
    t.is(
      modifyPath(path, { type: 'ReplacePrefixMatch', value: replace }, prefix(match)),
      want,
      `${path} ${match} ${replace}`,
    );
  t.is(modifyPath('/any/thing', { type: 'ReplaceFullPath', value: '/one' }, prefix('/any')), '/one');
});

test('header modifier: remove, set overwrites, add appends with a comma', (t) => {
  const h: Record<string, string | string[]> = { 'x-set': 'old', 'x-add': 'a', 'x-gone': '1', keep: 'k' };
  applyHeaderModifier(h, {
    set: [['x-set', 'new']],
    add: [
      ['x-add', 'b'],
      ['x-new', 'c'],
    ],
    remove: ['x-gone'],
  });
  t.deepEqual(h, { 'x-set': 'new', 'x-add': 'a,b', 'x-new': 'c', keep: 'k' });
});

test('redirect Location: scheme, host, port and path default to the request; well-known ports left out', (t) => {
  const req = { authority: 'echo:80', path: '/port', target: '/port?q=1', port: 80 };
  const m = prefix('/port');
  t.is(redirectLocation({ statusCode: 302, port: 8083 }, req, m), 'http://echo:8083/port?q=1');
  t.is(redirectLocation({ statusCode: 302, scheme: 'https' }, req, m), 'https://echo/port?q=1');
  t.is(redirectLocation({ statusCode: 302, hostname: 'example.org' }, req, m), 'http://example.org/port?q=1');
  t.is(
    redirectLocation({ statusCode: 301, scheme: 'https', port: 443, hostname: 'example.org' }, req, m),
    'https://example.org/port?q=1',
  );
  t.is(
    redirectLocation(
      { statusCode: 302, path: { type: 'ReplacePrefixMatch', value: '/new' } },
      { ...req, path: '/port/x', target: '/port/x' },
      m,
    ),
    'http://echo/new/x',
  );
  t.is(
    redirectLocation({ statusCode: 302 }, { ...req, authority: 'echo', port: 8080 }, m),
    'http://echo:8080/port?q=1',
  );
});
