import test from 'ava';
import { decodeValue, encodeKey, exemptKey } from './bpf-layout.js';
import { encodeSockaddr, formatIPv6, ipv4Bytes, ipv6Bytes } from './sys.js';

test('IPv6 text round-trips through bytes in RFC 5952 form', (t) => {
  for (const a of [
    '::',
    '::1',
    'fd00:244:1::2',
    '1:2:3:4:5:6:7:8',
    'fe80::1:0:0:1',
    '2001:db8::',
    '::ffff:10.1.2.3',
  ]) {
    t.is(formatIPv6(ipv6Bytes(a)), a);
  }
  t.is(formatIPv6(ipv6Bytes('2001:DB8:0:0:0:0:0:1')), '2001:db8::1');
  t.is(formatIPv6(ipv6Bytes('1:0:0:2:0:0:0:3')), '1:0:0:2::3');
});

test('sockaddr encoding puts the port in network order', (t) => {
  const v4 = encodeSockaddr('10.244.1.2', 15001);
  t.is(v4.length, 16);
  t.is(v4.readUInt16BE(2), 15001);
  t.deepEqual([...v4.subarray(4, 8)], [10, 244, 1, 2]);
  const v6 = encodeSockaddr('::1', 15008);
  t.is(v6.length, 28);
  t.is(v6[23], 1);
});

test('map keys and values match the C structs', (t) => {
  const key = encodeKey(0x0102030405060708n, 40000, 4);
  t.is(key.length, 16);
  t.is(key.readBigUInt64LE(0), 0x0102030405060708n);
  t.is(key.readUInt16LE(8), 40000);
  t.is(key[10], 4);
  const value = Buffer.alloc(20);
  ipv4Bytes('10.244.2.3').copy(value, 0);
  value.writeUInt16LE(8080, 16);
  value[18] = 4;
  t.deepEqual(decodeValue(value), { host: '10.244.2.3', port: 8080, family: 4 });
  const v6 = Buffer.alloc(20);
  ipv6Bytes('fd00:244:2::3').copy(v6, 0);
  v6.writeUInt16LE(443, 16);
  v6[18] = 6;
  t.deepEqual(decodeValue(v6), { host: 'fd00:244:2::3', port: 443, family: 6 });
  t.is(decodeValue(Buffer.alloc(20)), undefined);
  t.is(formatIPv6(exemptKey(ipv4Bytes('10.0.0.1'))), '::ffff:10.0.0.1');
});
