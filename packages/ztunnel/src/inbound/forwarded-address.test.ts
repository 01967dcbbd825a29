import test from 'ava';
import { forwardedAddress } from './inbound-listener.js';

test('the address in a forwarded for= node, with or without a port, IPv6 in brackets', (t) => {
  t.is(forwardedAddress('10.244.1.2'), '10.244.1.2');
  t.is(forwardedAddress('10.244.1.2:40000'), '10.244.1.2');
  t.is(forwardedAddress('[fd00:244:1::2]'), 'fd00:244:1::2');
  t.is(forwardedAddress('[fd00:244:1::2]:40000'), 'fd00:244:1::2');
  t.is(forwardedAddress('fe80::1:2'), 'fe80::1:2', 'a bare IPv6 address keeps its last group');
  t.is(forwardedAddress('::ffff:10.0.0.1'), '10.0.0.1');
  t.is(forwardedAddress('_hidden'), undefined, 'an obfuscated node names no address');
  t.is(forwardedAddress('unknown'), undefined);
  t.is(forwardedAddress('[10.0.0.1]'), '10.0.0.1');
  t.is(forwardedAddress('[zz::1]:80'), undefined);
});
