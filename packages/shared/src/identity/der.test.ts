import test from 'ava';
import {
  children,
  flagsOf,
  namedBits,
  oid,
  readBits,
  readOid,
  readTime,
  readTlv,
  sequence,
  setOf,
  time,
  tlv,
  unsignedInteger,
} from './der.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

test('lengths: short form below 128, long form with the fewest octets above', (t) => {
  t.is(hex(tlv(0x04, Buffer.alloc(127))).slice(0, 4), '047f');
  t.is(hex(tlv(0x04, Buffer.alloc(128))).slice(0, 6), '048180');
  t.is(hex(tlv(0x04, Buffer.alloc(256))).slice(0, 8), '04820100');
  for (const n of [0, 127, 128, 255, 256, 70_000]) {
    const der = tlv(0x04, Buffer.alloc(n, 7));
    const read = readTlv(der, 0);
    t.is(read.end - read.start, n);
    t.is(read.end, der.length);
  }
});

test('the reader refuses indefinite lengths, truncation and children past their parent', (t) => {
  t.throws(() => readTlv(Buffer.from('3080', 'hex'), 0), { message: /length encoding/ });
  t.throws(() => readTlv(Buffer.from('0405aabb', 'hex'), 0), { message: /past the end/ });
  t.throws(() => readTlv(Buffer.from('04', 'hex'), 0), { message: /truncated/ });
  t.throws(() => readTlv(Buffer.from('0484ffffffff', 'hex'), 0), { message: /past the end/ });
  t.throws(() => readTlv(Buffer.from('1f2200', 'hex'), 0), { message: /multi-byte tag/ });
  // A SEQUENCE claiming 3 octets whose child claims 4.
  t.throws(() => children(Buffer.from('30030404aabbccdd', 'hex'), 2, 5), { message: /past its parent/ });
});

test('object identifiers round-trip, multi-octet arcs included', (t) => {
  for (const id of [
    '2.5.29.17',
    '1.2.840.10045.4.3.2',
    '1.2.840.113549.1.9.14',
    '2.999.3',
    '1.3.6.1.4.1.311.21.7',
  ]) {
    const der = oid(id);
    t.is(readOid(der, readTlv(der, 0)), id);
  }
  t.is(hex(oid('1.2.840.10045.4.3.2')), '06082a8648ce3d040302');
});

test('integers stay positive and minimal', (t) => {
  t.is(hex(unsignedInteger(Buffer.from('00000102', 'hex'))), '02020102');
  t.is(hex(unsignedInteger(Buffer.from('80', 'hex'))), '02020080');
  t.is(hex(unsignedInteger(Buffer.from('00', 'hex'))), '020100');
});

test('named bits drop trailing zeros and read back (RFC 5280 KeyUsage)', (t) => {
  t.is(hex(namedBits(1)), '03020780'); // digitalSignature
  t.is(hex(namedBits(1 | (1 << 5) | (1 << 6))), '03020186'); // + keyCertSign, cRLSign
  t.is(hex(namedBits(1 << 8)), '0303070080'); // decipherOnly
  for (const flags of [1, 0x61, 0x100, 0x1ff]) {
    const der = namedBits(flags);
    t.is(flagsOf(readBits(der, readTlv(der, 0))), flags);
  }
});

test('times: UTCTime through 2049, GeneralizedTime from 2050, whole seconds', (t) => {
  const cases: [string, string][] = [
    ['2026-12-03T10:44:57.999Z', '170d3236313230333130343435375a'],
    ['2049-12-31T23:59:59.000Z', '170d3439313233313233353935395a'],
    ['2050-01-01T00:00:00.000Z', '180f32303530303130313030303030305a'],
  ];
  for (const [iso, der] of cases) {
    const enc = time(new Date(iso));
    t.is(hex(enc), der);
    t.is(readTime(enc, readTlv(enc, 0)).toISOString(), `${iso.slice(0, 19)}.000Z`);
  }
  const late = Buffer.from('170d3530303130313030303030305a', 'hex'); // UTCTime 50 is 1950
  t.is(readTime(late, readTlv(late, 0)).getUTCFullYear(), 1950);
  const local = Buffer.from('170b323631323033313034345a', 'hex'); // no seconds
  t.throws(() => readTime(local, readTlv(local, 0)), { message: /malformed time/ });
});

test('SET OF is sorted by encoding (X.690 §11.6)', (t) => {
  const a = sequence(oid('2.5.4.3'));
  const b = sequence(oid('2.5.4.10'));
  t.is(hex(setOf(b, a)), hex(setOf(a, b)));
});
