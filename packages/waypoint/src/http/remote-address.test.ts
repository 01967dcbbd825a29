import { parseIp } from '@zmesh/shared';
import test from 'ava';
import { remoteAddress } from './remote-address.js';

const PEER = '10.244.1.5';
const peer = parseIp(PEER)!;
/** The address remote.ip reads, as text ('?' if it is not one of the addresses below). */
const remote = (xff: string | undefined, hops: number) => {
  const r = remoteAddress(xff, hops, peer);
  const known = [PEER, '56.5.6.7', '72.9.5.6', '98.1.2.3', '2001:db8::1', '192.0.2.9'];
  return known.find((a) => JSON.stringify(parseIp(a)) === JSON.stringify(r)) ?? '?';
};

test('no trusted hop: the peer, whatever X-Forwarded-For claims (a client cannot spoof remote.ip)', (t) => {
  t.is(remote(undefined, 0), PEER);
  t.is(remote('1.2.3.4', 0), PEER);
  t.is(remote('1.2.3.4, 5.6.7.8', 0), PEER);
});

test('N trusted hops: the Nth address from the right of the header as received (Envoy, Istio numTrustedProxies)', (t) => {
  // Istio's gateway-topology example: numTrustedProxies 2 reads 72.9.5.6.
  t.is(remote('56.5.6.7, 72.9.5.6, 98.1.2.3', 2), '72.9.5.6');
  t.is(remote('56.5.6.7, 72.9.5.6, 98.1.2.3', 1), '98.1.2.3');
  t.is(remote('56.5.6.7, 72.9.5.6, 98.1.2.3', 3), '56.5.6.7');
  t.is(remote('56.5.6.7,72.9.5.6', 1), '72.9.5.6', 'no space after the comma');
  t.is(remote('2001:db8::1, 192.0.2.1', 2), '2001:db8::1');
  t.is(remote('::ffff:192.0.2.9', 1), '192.0.2.9', 'v4-mapped folds to v4');
});

test('too few entries, an empty entry or one that is not an address: the peer, as Envoy falls back', (t) => {
  t.is(remote('56.5.6.7, 72.9.5.6', 3), PEER);
  t.is(remote(undefined, 1), PEER);
  t.is(remote('', 1), PEER);
  t.is(remote('1.2.3.4, ', 1), PEER, 'trailing comma');
  t.is(remote(',1.2.3.4', 2), PEER, 'leading comma');
  t.is(remote('1.2.3.4:8080', 1), PEER, 'a port is not an address');
  t.is(remote('[2001:db8::1]', 1), PEER, 'brackets are not an address');
  t.is(remote('unknown, 1.2.3.4', 2), PEER, 'RFC 7239 obfuscated names are not addresses');
  t.is(remote('x'.repeat(8000), 1), PEER);
  t.is(remoteAddress('1.2.3.4', 2, undefined), undefined, 'no peer known: none');
});
