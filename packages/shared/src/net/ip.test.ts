import test from 'ava';
import {
  bytesToIp,
  canonicalIp,
  cidrContains,
  formatHostPort,
  formatIpBytes,
  ipToBytes,
  parseCidr,
  parseIp,
} from './ip.js';

/**
 * The agreed rules, one row per edge case: canonical text (undefined: refused) and whether
 * a policy block matches the address. Canonical text and CIDR matching use one parser, so
 * an address is refused by both or by neither.
 */
const table: Array<{ input: string; canonical: string | undefined; inside?: string }> = [
  // IPv4: decimal octets, no leading zeros (octal to some parsers).
  { input: '10.1.2.7', canonical: '10.1.2.7', inside: '10.0.0.0/8' },
  { input: '0.0.0.0', canonical: '0.0.0.0', inside: '0.0.0.0/0' },
  { input: '255.255.255.255', canonical: '255.255.255.255', inside: '255.255.255.255/32' },
  { input: '010.1.2.7', canonical: undefined },
  { input: '10.01.2.7', canonical: undefined },
  { input: '256.1.2.3', canonical: undefined },
  { input: '1.2.3', canonical: undefined },
  { input: '1.2.3.4.5', canonical: undefined },
  { input: ' 1.2.3.4', canonical: undefined },
  // IPv6: RFC 5952 text, lowercase, the longest zero run compressed (the first on a tie).
  { input: '::', canonical: '::', inside: '::/0' },
  { input: '::1', canonical: '::1', inside: '::1/128' },
  { input: '0:0:0:0:0:0:0:1', canonical: '::1' },
  { input: 'FD00:244:1::5', canonical: 'fd00:244:1::5', inside: 'fd00::/8' },
  { input: 'fd00:0:0:1:0:0:0:5', canonical: 'fd00:0:0:1::5' },
  { input: '1:0:0:2:0:0:3:4', canonical: '1::2:0:0:3:4' },
  { input: '1:0:2:3:4:5:6:7', canonical: '1:0:2:3:4:5:6:7' },
  { input: '1:2:3:4:5:6:7:8', canonical: '1:2:3:4:5:6:7:8' },
  { input: '1::', canonical: '1::' },
  { input: '0001:02:003::', canonical: '1:2:3::' },
  { input: '1:2:3:4:5:6:7::', canonical: '1:2:3:4:5:6:7:0' },
  { input: '00001::', canonical: undefined },
  { input: '1::2::3', canonical: undefined },
  { input: ':::', canonical: undefined },
  { input: ':1::', canonical: undefined },
  { input: '1::2:', canonical: undefined },
  { input: '1:2:3:4:5:6:7:8:9', canonical: undefined },
  { input: 'g::1', canonical: undefined },
  { input: '::1.2.3', canonical: undefined },
  // IPv4-mapped IPv6 is the IPv4 address, in text and in matching.
  { input: '::ffff:10.1.2.7', canonical: '10.1.2.7', inside: '10.1.0.0/16' },
  { input: '::FFFF:a01:207', canonical: '10.1.2.7', inside: '::ffff:10.1.2.0/120' },
  { input: '::ffff:010.1.2.7', canonical: undefined },
  { input: '::10.1.2.7', canonical: '::a01:207' },
  // Zones: only on link-local IPv6, dropped; refused anywhere else, and empty ones too.
  { input: 'fe80::1%eth0', canonical: 'fe80::1', inside: 'fe80::/10' },
  { input: 'FEBF::1%2', canonical: 'febf::1' },
  { input: 'fe80::1%', canonical: undefined },
  { input: 'fe80::1%eth0%1', canonical: undefined },
  { input: 'fe80::1%eth 0', canonical: undefined },
  { input: 'fec0::1%eth0', canonical: undefined },
  { input: 'fd00::1%eth0', canonical: undefined },
  { input: '::ffff:10.1.2.7%eth0', canonical: undefined },
  { input: '10.1.2.7%eth0', canonical: undefined },
  // Not addresses.
  { input: 'host.example', canonical: undefined },
  { input: '', canonical: undefined },
  { input: '[::1]', canonical: undefined },
  { input: '10.0.0.0/8', canonical: undefined },
];

for (const { input, canonical, inside } of table) {
  test(`${JSON.stringify(input)}: canonical ${canonical ?? 'refused'}${inside ? `, inside ${inside}` : ''}`, (t) => {
    t.is(canonicalIp(input), canonical);
    const parsed = parseIp(input);
    t.is(
      parsed === undefined,
      canonical === undefined,
      'the matcher refuses exactly what canonical text refuses',
    );
    if (canonical !== undefined) t.is(canonicalIp(canonical), canonical, 'canonical text is a fixed point');
    if (inside !== undefined) {
      const block = parseCidr(inside);
      if (typeof block === 'string') return t.fail(block);
      t.true(cidrContains(block, parsed!));
    }
  });
}

test('bytes keep the family as written; text from bytes is canonical', (t) => {
  t.deepEqual(ipToBytes('10.0.0.1'), Uint8Array.from([10, 0, 0, 1]));
  t.deepEqual(
    ipToBytes('::ffff:10.0.0.1'),
    Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 0, 0, 1]),
  );
  t.is(ipToBytes('fd00::1%eth0'), undefined);
  t.is(ipToBytes('010.0.0.1'), undefined);
  t.is(bytesToIp(ipToBytes('10.0.0.1')!), '10.0.0.1');
  t.is(bytesToIp(ipToBytes('fd00::7')!), 'fd00::7');
  t.is(bytesToIp(ipToBytes('fe80::7%eth0')!), 'fe80::7');
  t.is(bytesToIp(ipToBytes('::ffff:10.0.0.1')!), '10.0.0.1');
  t.is(bytesToIp(Uint8Array.from([255, 254, 253, 252])), '255.254.253.252');
  t.is(formatIpBytes(ipToBytes('::ffff:10.0.0.1')!), '::ffff:10.0.0.1', 'as written: the mapped form stays');
  t.is(formatIpBytes(ipToBytes('FD00:0:0::7')!), 'fd00::7');
  t.is(formatIpBytes(new Uint8Array(3)), undefined);
  t.is(bytesToIp(new Uint8Array(5)), undefined);
  t.is(formatHostPort('fd00::7', 80), '[fd00::7]:80');
  t.is(formatHostPort('10.0.0.1', 80), '10.0.0.1:80');
});
