import test from 'ava';
import type { HttpRoute, RouteMatch } from '../config/waypoint-config.js';
import { pickWeighted, queryReader, type RequestFacts, RouteTable } from './route-table.js';

const rule = (name: string, matches: RouteMatch[]) => ({
  matches,
  backendRefs: [{ name, namespace: 'n', weight: 1 }],
});
const route = (name: string, rules: HttpRoute['rules'], hostnames: string[] = []): HttpRoute => ({
  name,
  namespace: 'n',
  parentRefs: [{ name: 's', namespace: 'n' }],
  hostnames,
  rules,
});
const req = (
  path: string,
  method = 'GET',
  headers: Record<string, string> = {},
  host = 's',
): RequestFacts => {
  const q = path.indexOf('?');
  return {
    method,
    path: q === -1 ? path : path.slice(0, q),
    host,
    header: (n) => headers[n],
    query: queryReader(path),
  };
};
const m = (
  type: 'Exact' | 'PathPrefix' | 'RegularExpression',
  value: string,
  extra: Partial<RouteMatch> = {},
): RouteMatch => ({ path: { type, value }, headers: [], ...extra });

const table = new RouteTable([
  route('b-catchall', [rule('default', [])]),
  route('a-main', [
    rule('prefix-foo', [m('PathPrefix', '/foo')]),
    rule('prefix-foo-bar', [m('PathPrefix', '/foo/bar/')]),
    rule('exact-foo', [m('Exact', '/foo')]),
    rule('post-foo', [m('PathPrefix', '/foo', { method: 'POST' })]),
    rule('header-foo', [
      m('PathPrefix', '/foo', {
        headers: [
          { type: 'Exact', name: 'x-a', value: '1' },
          { type: 'RegularExpression', name: 'x-b', value: 'v[0-9]+' },
        ],
      }),
    ]),
    rule('regex', [m('RegularExpression', '/items/[0-9]+')]),
  ]),
]);

test('Gateway API precedence: exact, longest prefix, method, header count, then route order', (t) => {
  const cases: Array<[RequestFacts, string]> = [
    [req('/foo'), 'exact-foo'],
    [req('/foo/x'), 'prefix-foo'],
    [req('/foobar'), 'default'],
    [req('/foo/bar'), 'prefix-foo-bar'],
    [req('/foo/bar/baz'), 'prefix-foo-bar'],
    [req('/foo/x', 'POST'), 'post-foo'],
    [req('/foo/x', 'GET', { 'x-a': '1', 'x-b': 'v12' }), 'header-foo'],
    [req('/foo/x', 'GET', { 'x-a': '1', 'x-b': 'w12' }), 'prefix-foo'],
    [req('/items/42'), 'regex'],
    [req('/items/42x'), 'default'],
  ];
  for (const [r, want] of cases)
    t.is(table.match(r)?.rule.backendRefs[0]?.name, want, `${r.method} ${r.path}`);
});

test('queryParams: exact and regex on the first value of a case-sensitive name; more query matches rank higher', (t) => {
  const q = (name: string, value: string, type: 'Exact' | 'RegularExpression' = 'Exact') => ({
    type,
    name,
    value,
  });
  const t2 = new RouteTable([
    route('q', [
      rule('whale', [m('PathPrefix', '/', { queryParams: [q('animal', 'whale')] })]),
      rule('dolphin', [m('PathPrefix', '/', { queryParams: [q('animal', 'dolphin')] })]),
      rule('blue-dolphin', [
        m('PathPrefix', '/', { queryParams: [q('animal', 'dolphin'), q('color', 'blue')] }),
      ]),
      rule('re', [m('PathPrefix', '/re', { queryParams: [q('id', '[0-9]+', 'RegularExpression')] })]),
    ]),
  ]);
  const cases: Array<[string, string | undefined]> = [
    ['/?animal=whale', 'whale'],
    ['/?animal=whale&other=x', 'whale'],
    ['/?animal=dolphin&color=blue', 'blue-dolphin'],
    ['/?animal=dolphin&color=yellow', 'dolphin'],
    ['/?ANIMAL=whale', undefined],
    ['/?animal=Whale', undefined],
    ['/?animal=whaledolphin', undefined],
    ['/?animal=whale&animal=dolphin', 'whale'],
    ['/?animal=wh%61le', 'whale'],
    ['/', undefined],
    ['/re?id=42', 're'],
    ['/re?id=42x', undefined],
  ];
  for (const [path, want] of cases) t.is(t2.match(req(path))?.rule.backendRefs[0]?.name, want, path);
});

test('hostnames restrict a route; wildcards match one or more labels', (t) => {
  const t2 = new RouteTable([route('h', [rule('only-api', [])], ['*.example.com', 'api'])]);
  t.truthy(t2.match(req('/', 'GET', {}, 'a.example.com:80')));
  t.truthy(t2.match(req('/', 'GET', {}, 'API')));
  t.falsy(t2.match(req('/', 'GET', {}, 'example.com')));
});

test('weighted pick follows weights; all-zero weights pick nothing', (t) => {
  let seed = 1;
  const random = () => {
    seed = (seed * 16807) % 2147483647;
    return seed / 2147483647;
  };
  const counts = [0, 0, 0];
  for (let i = 0; i < 10_000; i++) counts[pickWeighted([70, 0, 30], random)]!++;
  t.is(counts[1], 0);
  t.true(Math.abs(counts[0]! / 10_000 - 0.7) < 0.02);
  t.is(pickWeighted([0, 0], random), -1);
});

test('a tie across routes goes to the oldest route, then to namespace/name in code point order, then to rule order', (t) => {
  const same = (name: string, backend: string, createdAt?: number): HttpRoute => ({
    ...route(name, [
      rule(backend, [m('PathPrefix', '/tie')]),
      rule(`${backend}-second`, [m('PathPrefix', '/tie')]),
    ]),
    ...(createdAt === undefined ? {} : { createdAt }),
  });
  const winner = (routes: HttpRoute[]) =>
    new RouteTable(routes).match(req('/tie/x'))?.rule.backendRefs[0]?.name;
  t.is(winner([same('a', 'young', 2000), same('z', 'old', 1000)]), 'old', 'older beats alphabetically first');
  t.is(winner([same('z', 'old', 1000), same('a', 'young', 2000)]), 'old', 'whatever the config order');
  t.is(winner([same('b', 'b', 1000), same('a', 'a', 1000)]), 'a', 'same age: by name');
  t.is(winner([same('b', 'b'), same('a', 'a')]), 'a', 'no timestamps (a file): by name');
  // Code point order, as Gateway API's Go implementations compare names: "a-b" before "ab".
  t.is(winner([same('ab', 'ab'), same('a-b', 'a-b')]), 'a-b');
  t.is(winner([same('a', 'first')]), 'first', 'within a route: the first rule');
});
