import test from 'ava';
import { formatSpiffeId, parseSpiffeId } from './spiffe-id.js';

const valid: [
  string,
  Partial<{ trustDomain: string; path: string; namespace: string; serviceAccount: string }>,
][] = [
  [
    'spiffe://cluster.local/ns/default/sa/web',
    { trustDomain: 'cluster.local', namespace: 'default', serviceAccount: 'web' },
  ],
  ['spiffe://example.org/workload', { trustDomain: 'example.org', path: '/workload' }],
  ['spiffe://a/b', { trustDomain: 'a', path: '/b' }],
  ['spiffe://td_with-dash.and_underscore/x', { trustDomain: 'td_with-dash.and_underscore' }],
  ['spiffe://1.2.3.4/x', { trustDomain: '1.2.3.4' }],
  ['spiffe://td/Path.With-Mixed_Case/9', { path: '/Path.With-Mixed_Case/9' }],
  ['spiffe://td/ns/a/sa/b/extra', { path: '/ns/a/sa/b/extra', namespace: undefined }],
  ['spiffe://td/a/.b/..c', { path: '/a/.b/..c' }],
  [`spiffe://${'a'.repeat(255)}/x`, { trustDomain: 'a'.repeat(255) }],
];

const invalid: [string, RegExp][] = [
  ['', /empty/],
  ['spiffe://', /trust domain is empty/],
  ['spiffe:///path', /trust domain is empty/],
  ['http://td/ns/a/sa/b', /scheme/],
  ['SPIFFE://td/x', /scheme/],
  ['spiffe:/td/x', /scheme/],
  ['spiffe://TD/x', /lowercase letters/],
  ['spiffe://td', /needs a path/],
  ['spiffe://td/', /segments must not be empty/],
  ['spiffe://td/a//b', /segments must not be empty/],
  ['spiffe://td/a/', /segments must not be empty/],
  ['spiffe://td/./a', /"\." is not allowed/],
  ['spiffe://td/a/..', /"\.\." is not allowed/],
  ['spiffe://td/a?x=1', /query/],
  ['spiffe://td/a#frag', /fragment/],
  ['spiffe://td:8080/a', /port/],
  ['spiffe://user@td/a', /userinfo/],
  ['spiffe://td/a%20b', /letters, digits/],
  ['spiffe://td/a b', /letters, digits/],
  ['spiffe://td/ñ', /letters, digits/],
  ['spiffe://t d/a', /lowercase letters/],
  [`spiffe://${'a'.repeat(256)}/x`, /longer than 255/],
  [`spiffe://td/${'a/'.repeat(1100)}a`, /longer than 2048/],
];

for (const [uri, want] of valid) {
  test(`valid: ${uri.slice(0, 60)}`, (t) => {
    const r = parseSpiffeId(uri);
    if (!r.ok) return t.fail(r.error.join('; '));
    t.is(r.value.uri, uri);
    for (const [k, v] of Object.entries(want)) t.is(r.value[k as keyof typeof want], v, k);
  });
}

for (const [uri, reason] of invalid) {
  test(`invalid: ${JSON.stringify(uri.slice(0, 60))}`, (t) => {
    const r = parseSpiffeId(uri);
    t.false(r.ok);
    if (!r.ok)
      t.true(
        r.error.some((e) => reason.test(e)),
        r.error.join('; '),
      );
  });
}

test('trust-domain-only IDs are accepted only when asked for', (t) => {
  t.false(parseSpiffeId('spiffe://td').ok);
  t.true(parseSpiffeId('spiffe://td', { allowTrustDomainOnly: true }).ok);
});

test('formatSpiffeId builds the Istio shape that parses back', (t) => {
  const uri = formatSpiffeId('cluster.local', 'shop', 'cart');
  t.is(uri, 'spiffe://cluster.local/ns/shop/sa/cart');
  const r = parseSpiffeId(uri);
  t.true(r.ok && r.value.namespace === 'shop' && r.value.serviceAccount === 'cart');
});

test('non-string input is refused, not thrown', (t) => {
  t.false(parseSpiffeId(undefined as unknown as string).ok);
});
