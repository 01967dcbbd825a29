import test from 'ava';
import {
  normalizePath,
  type PathNormalization,
  readRequestTarget,
  removeDotSegments,
} from './request-target.js';

test('RFC 3986 §5.2.4 examples and edges of removeDotSegments', (t) => {
  const cases: Array<[string, string]> = [
    ['/a/b/c/./../../g', '/a/g'],
    ['/mid/content=5/../6', '/mid/6'],
    ['/', '/'],
    ['/..', '/'],
    ['/../..', '/'],
    ['/a/..', '/'],
    ['/a/.', '/a/'],
    ['/a/./b', '/a/b'],
    ['//a', '//a'],
    ['/a/../../b', '/b'],
    ['/..a/b', '/..a/b'],
  ];
  for (const [input, want] of cases) t.is(removeDotSegments(input), want, input);
});

test('each normalization mode, path by path', (t) => {
  type Row = [string, Partial<Record<PathNormalization, string>>];
  const bad = 'refused';
  const all = (v: string) => ({ BASE: v, MERGE_SLASHES: v, DECODE_AND_MERGE_SLASHES: v });
  const rows: Row[] = [
    ['/admin', all('/admin')],
    ['/%61dmin', all('/admin')],
    ['/%2E%2e/admin', all('/admin')],
    ['/a\\..\\admin', all('/admin')],
    ['//admin', { BASE: '//admin', MERGE_SLASHES: '/admin', DECODE_AND_MERGE_SLASHES: '/admin' }],
    ['/a//b/../c', { BASE: '/a//c', MERGE_SLASHES: '/a/c', DECODE_AND_MERGE_SLASHES: '/a/c' }],
    ['/a/%2f/admin', { BASE: bad, MERGE_SLASHES: bad, DECODE_AND_MERGE_SLASHES: '/a/admin' }],
    ['/a%2F..%2Fadmin', { BASE: bad, MERGE_SLASHES: bad, DECODE_AND_MERGE_SLASHES: '/admin' }],
    ['/a%5c..%5Cadmin', { BASE: bad, MERGE_SLASHES: bad, DECODE_AND_MERGE_SLASHES: '/admin' }],
    ['/a/%7e%2D', all('/a/~-')],
    ['/a/%c3%a9', all('/a/%C3%A9')],
    ['/a/%20b', all('/a/%20b')],
    ['/a/%zz', all(bad)],
    ['/a/%4', all(bad)],
    ['/a/..;/admin', all(bad)],
    ['/.;x/admin', all(bad)],
    ['/a/x..;/b', all('/a/x..;/b')],
    ['/a;b/../admin', all('/admin')],
  ];
  for (const [input, want] of rows)
    for (const [mode, expected] of Object.entries(want) as Array<[PathNormalization, string]>) {
      const r = normalizePath(input, mode);
      t.is(r.ok ? r.path : bad, expected, `${mode} ${input}`);
    }
});

test('request-target forms: origin, absolute (HTTP/1.1 only, same authority), asterisk (OPTIONS only)', (t) => {
  const host = 'web.shop.svc.cluster.local';
  const read = (protocol: 'h1' | 'h2', method: string, raw: string, authority = host) => {
    const r = readRequestTarget(protocol, method, raw, authority);
    return r.ok ? r.target : r.reason;
  };
  t.is(read('h1', 'GET', '/a/../b?x=1'), '/b?x=1');
  t.is(read('h1', 'GET', `http://${host}/admin`), '/admin');
  t.is(read('h1', 'GET', `HTTP://WEB.shop.svc.cluster.local:80/x`), '/x');
  t.is(read('h1', 'GET', `http://${host}:8080/x`, `${host}:8080`), '/x');
  t.is(read('h1', 'GET', `http://${host}:8080/x`), 'target_authority');
  t.is(read('h1', 'GET', `https://${host}/x`), '/x');
  t.is(read('h1', 'GET', `http://${host}?q`), '/?q');
  t.is(read('h1', 'GET', 'http://evil.example/admin'), 'target_authority');
  t.is(read('h1', 'GET', `http://u:p@${host}/`), 'target_userinfo');
  t.is(read('h1', 'GET', `http://[::1]:80/x`, '[::1]'), '/x');
  t.is(read('h1', 'GET', 'ftp://x/y'), 'target_form');
  t.is(read('h1', 'GET', 'admin'), 'target_form');
  t.is(read('h1', 'CONNECT', `${host}:443`), 'target_form');
  t.is(read('h1', 'GET', '*'), 'asterisk_form');
  t.is(read('h1', 'OPTIONS', '*'), '*');
  t.is(read('h2', 'GET', `http://${host}/admin`), 'target_form');
  t.is(read('h2', 'GET', ''), 'target_form');
  t.is(read('h1', 'GET', '/a#b'), 'target_fragment');
  t.is(read('h1', 'GET', '/a?b#c'), 'target_fragment');
  t.is(read('h1', 'GET', '/a?next=/../admin'), '/a?next=/../admin');
});
