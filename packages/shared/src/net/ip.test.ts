import test from 'ava';
import { bytesToIp, canonicalIp, formatHostPort, ipToBytes } from './ip.js';

const table: Array<[string, string | undefined]> = [
  ['10.1.2.7', '10.1.2.7'],
  ['010.1.2.7', undefined],
  ['::1', '::1'],
  ['0:0:0:0:0:0:0:1', '::1'],
  ['FD00:244:1::5', 'fd00:244:1::5'],
  ['fd00:0:0:1:0:0:0:5', 'fd00:0:0:1::5'],
  ['::ffff:10.1.2.7', '10.1.2.7'],
  ['::ffff:a01:207', '10.1.2.7'],
  ['fe80::1%eth0', undefined],
  ['host.example', undefined],
  ['', undefined],
  ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'],
  ['1::', '1::'],
];

for (const [input, expected] of table) {
  test(`canonicalIp(${JSON.stringify(input)}) = ${expected}`, (t) => {
    t.is(canonicalIp(input), expected);
  });
}

test('bytes round trip for both families', (t) => {
  t.is(bytesToIp(ipToBytes('10.0.0.1')!), '10.0.0.1');
  t.is(bytesToIp(ipToBytes('fd00::7')!), 'fd00::7');
  t.is(bytesToIp(new Uint8Array(5)), undefined);
  t.is(formatHostPort('fd00::7', 80), '[fd00::7]:80');
});
