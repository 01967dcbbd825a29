import test from 'ava';
import { buildConnectHeaders, parseConnectAuthority, validateConnectHeaders } from './connect-request.js';

const goodAuthorities: [string, { host: string; port: number; family: 4 | 6 }][] = [
  ['10.1.2.7:8080', { host: '10.1.2.7', port: 8080, family: 4 }],
  ['0.0.0.0:1', { host: '0.0.0.0', port: 1, family: 4 }],
  ['255.255.255.255:65535', { host: '255.255.255.255', port: 65535, family: 4 }],
  ['[::1]:15008', { host: '::1', port: 15008, family: 6 }],
  ['[fd00:0:0:0:0:0:0:7]:80', { host: 'fd00::7', port: 80, family: 6 }],
  ['[FD00::A]:80', { host: 'fd00::a', port: 80, family: 6 }],
  ['[::ffff:10.0.0.1]:80', { host: '::ffff:10.0.0.1', port: 80, family: 6 }],
  ['[::FFFF:a00:1]:80', { host: '::ffff:10.0.0.1', port: 80, family: 6 }],
];

const badAuthorities: [string, RegExp][] = [
  ['', /empty/],
  ['10.1.2.7', /missing port/],
  ['10.1.2.7:', /invalid port/],
  ['10.1.2.7:0', /invalid port/],
  ['10.1.2.7:65536', /invalid port/],
  ['10.1.2.7:080', /invalid port/],
  ['10.1.2.7:+80', /invalid port/],
  ['10.1.2.7:8a', /invalid port/],
  ['010.1.2.7:80', /not a canonical IPv4/],
  ['10.1.2:80', /not a canonical IPv4/],
  ['256.1.2.3:80', /not a canonical IPv4/],
  ['10.1.2.7.8:80', /not a canonical IPv4/],
  ['0x0a.1.2.3:80', /hostnames are not allowed/],
  ['example.com:80', /hostnames are not allowed/],
  ['localhost:80', /hostnames are not allowed/],
  ['::1:80', /must be in brackets/],
  ['[::1]', /expected \[ipv6\]:port/],
  ['[::1]80', /expected \[ipv6\]:port/],
  ['[fe80::1%eth0]:80', /zone ids/],
  ['[10.1.2.7]:80', /not an IPv6 address/],
  ['[::g]:80', /not an IPv6 address/],
  ['user@10.1.2.7:80', /hostnames are not allowed/],
  [`${'1'.repeat(70)}:80`, /longer than/],
];

for (const [authority, want] of goodAuthorities) {
  test(`authority ok: ${authority}`, (t) => {
    t.deepEqual(parseConnectAuthority(authority), { ok: true, value: want });
  });
}

for (const [authority, reason] of badAuthorities) {
  test(`authority refused: ${JSON.stringify(authority.slice(0, 40))}`, (t) => {
    const r = parseConnectAuthority(authority);
    t.false(r.ok);
    if (!r.ok)
      t.true(
        r.error.some((e) => reason.test(e)),
        r.error.join('; '),
      );
  });
}

type H = Record<string, string | string[] | undefined>;
const base: H = { ':method': 'CONNECT', ':authority': '10.0.0.1:80' };
const requests: [string, H, 'ok' | 'ZM_ERR_HBONE_BAD_METHOD' | 'ZM_ERR_HBONE_BAD_AUTHORITY'][] = [
  ['plain CONNECT', base, 'ok'],
  ['GET', { ...base, ':method': 'GET', ':path': '/' }, 'ZM_ERR_HBONE_BAD_METHOD'],
  ['lowercase connect', { ...base, ':method': 'connect' }, 'ZM_ERR_HBONE_BAD_METHOD'],
  ['no method', { ':authority': '10.0.0.1:80' }, 'ZM_ERR_HBONE_BAD_METHOD'],
  [
    'extended CONNECT',
    { ...base, ':protocol': 'websocket', ':path': '/', ':scheme': 'https' },
    'ZM_ERR_HBONE_BAD_METHOD',
  ],
  ['CONNECT with :path', { ...base, ':path': '/' }, 'ZM_ERR_HBONE_BAD_METHOD'],
  ['no authority', { ':method': 'CONNECT' }, 'ZM_ERR_HBONE_BAD_AUTHORITY'],
  ['hostname authority', { ...base, ':authority': 'db.svc:5432' }, 'ZM_ERR_HBONE_BAD_AUTHORITY'],
  [
    'two authorities',
    { ...base, ':authority': ['10.0.0.1:80', '10.0.0.2:80'] },
    'ZM_ERR_HBONE_BAD_AUTHORITY',
  ],
];

for (const [name, headers, want] of requests) {
  test(`CONNECT headers: ${name} → ${want}`, (t) => {
    const r = validateConnectHeaders(headers);
    if (want === 'ok') t.true(r.ok);
    else t.is(r.ok ? 'ok' : r.error.code, want);
  });
}

test('optional headers are parsed, and malformed ones dropped without failing', (t) => {
  const tp = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`;
  const ok = validateConnectHeaders({
    ...base,
    forwarded: 'for="[2001:db8::1]:4711";proto=https, for=10.9.9.9',
    baggage: 'k8s.namespace.name=shop, k8s.pod.name=cart%2D1;p=1, bad key=x, =x',
    traceparent: tp,
  });
  t.deepEqual(ok.ok && ok.value, {
    authority: { host: '10.0.0.1', port: 80, family: 4 },
    forwardedFor: '[2001:db8::1]:4711',
    baggage: { 'k8s.namespace.name': 'shop', 'k8s.pod.name': 'cart-1' },
    traceparent: tp,
  });
  for (const traceparent of [
    `01-${'a'.repeat(32)}-${'b'.repeat(16)}-01`,
    `00-${'0'.repeat(32)}-${'b'.repeat(16)}-01`,
    `00-${'a'.repeat(32)}-${'0'.repeat(16)}-01`,
    `00-${'A'.repeat(32)}-${'b'.repeat(16)}-01`,
    'garbage',
  ]) {
    const r = validateConnectHeaders({
      ...base,
      traceparent,
      forwarded: 'for="unterminated',
      baggage: '%%%=%%',
    });
    t.deepEqual(r.ok && r.value, { authority: { host: '10.0.0.1', port: 80, family: 4 } }, traceparent);
  }
});

test('buildConnectHeaders round-trips through validateConnectHeaders', (t) => {
  const req = {
    authority: '[fd00::7]:8080',
    forwardedFor: '10.1.1.1:5555',
    baggage: { 'k8s.workload.name': 'a b,c;d=e' },
    traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-00`,
  };
  const headers = buildConnectHeaders(req);
  t.is(headers[':method'], 'CONNECT');
  t.is(headers.forwarded, 'for="10.1.1.1:5555"');
  const r = validateConnectHeaders(headers);
  t.deepEqual(r.ok && r.value, {
    authority: { host: 'fd00::7', port: 8080, family: 6 },
    forwardedFor: req.forwardedFor,
    baggage: req.baggage,
    traceparent: req.traceparent,
  });
});
