import { BlockList } from 'node:net';
import test from 'ava';
import fc from 'fast-check';
import { cidrContains, cidrText, formatIp, makeCidr, parseCidr, parseIp } from './ip.js';

test('parses IPv4, IPv6, embedded IPv4, link-local zones; folds IPv4-mapped to IPv4', (t) => {
  t.deepEqual(parseIp('10.1.2.3'), { v4: true, w: [0x0a010203] });
  t.deepEqual(parseIp('::ffff:10.1.2.3'), { v4: true, w: [0x0a010203] });
  t.deepEqual(parseIp('::ffff:a01:203'), { v4: true, w: [0x0a010203] });
  t.deepEqual(parseIp('fd00::1'), { v4: false, w: [0xfd000000, 0, 0, 1] });
  t.deepEqual(parseIp('fe80::1%eth0'), { v4: false, w: [0xfe800000, 0, 0, 1] });
  t.deepEqual(parseIp('::'), { v4: false, w: [0, 0, 0, 0] });
  t.deepEqual(parseIp('1:2:3:4:5:6:7:8'), { v4: false, w: [0x10002, 0x30004, 0x50006, 0x70008] });
});

test('rejects malformed addresses', (t) => {
  for (const bad of [
    '',
    '1.2.3',
    '1.2.3.4.5',
    '256.1.1.1',
    '01.2.3.4',
    '1::2::3',
    '1:2:3:4:5:6:7:8:9',
    'g::1',
    '::1.2.3',
  ]) {
    t.is(parseIp(bad), undefined, bad);
  }
});

test('CIDRs: host bits cleared, bare addresses full length, mapped blocks become IPv4', (t) => {
  const c = parseCidr('10.1.2.3/8');
  t.is(typeof c === 'string' ? c : cidrText(c), '10.0.0.0/8');
  const bare = parseCidr('fd00::1');
  t.is(typeof bare === 'string' ? bare : cidrText(bare), 'fd00::1/128');
  const mapped = makeCidr('::ffff:10.0.0.0', 104);
  t.is(typeof mapped === 'string' ? mapped : cidrText(mapped), '10.0.0.0/8');
  t.regex(String(parseCidr('10.0.0.0/33')), /exceeds 32/);
  t.regex(String(parseCidr('10.0.0.0/-1')), /malformed prefix/);
  t.regex(String(makeCidr('10.0.0.0', 1.5)), /not a non-negative integer/);
});

test('cidrContains agrees with node:net BlockList', (t) => {
  const v4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.'));
  const v6 = fc
    .array(fc.nat(0xffff), { minLength: 8, maxLength: 8 })
    .map((g) => g.map((x) => x.toString(16)).join(':'));
  const arb = fc.oneof(
    fc.tuple(v4, fc.nat(32), v4).map(([a, l, ip]) => ({ a, l, ip, fam: 'ipv4' as const })),
    fc.tuple(v6, fc.nat(128), v6).map(([a, l, ip]) => ({ a, l, ip, fam: 'ipv6' as const })),
  );
  fc.assert(
    fc.property(arb, ({ a, l, ip, fam }) => {
      // Share leading bits so that containment is sometimes true.
      const near =
        fam === 'ipv4' ? `${a.split('.').slice(0, 2).join('.')}.${ip.split('.').slice(2).join('.')}` : ip;
      const c = makeCidr(a, l);
      const p = parseIp(near);
      if (typeof c === 'string' || p === undefined) return false;
      const list = new BlockList();
      list.addSubnet(a, l, fam);
      return cidrContains(c, p) === list.check(near, fam);
    }),
    { numRuns: 500 },
  );
  t.pass();
});

test('formatIp round-trips', (t) => {
  for (const ip of ['10.0.0.1', '255.255.255.255', 'fd00::1', '1:2:3:4:5:6:7:8'])
    t.is(formatIp(parseIp(ip)!), ip);
});
