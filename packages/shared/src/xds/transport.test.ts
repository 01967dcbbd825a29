import { X509Certificate } from 'node:crypto';
import { checkServerIdentity } from 'node:tls';
import test from 'ava';
import { CertificateAuthority } from '../identity/ca.js';
import { TrustBundle } from '../identity/trust-bundle.js';
import {
  addressHost,
  ControlPlaneChannels,
  controlPlaneCredentials,
  controlPlaneUsesTls,
  tlsFailure,
} from './transport.js';

test('one rule: loopback and unix: are plaintext, every other host is TLS', (t) => {
  for (const a of ['127.0.0.1:15010', '127.9.0.3:1', '[::1]:15010', 'localhost:15010', 'unix:/run/x.sock'])
    t.false(controlPlaneUsesTls(a), a);
  for (const a of ['10.255.0.1:15010', '[fd00::1]:15010', 'zmesh-control-plane.zmesh-system.svc:15010'])
    t.true(controlPlaneUsesTls(a), a);
  t.is(addressHost('[fd00::1]:15010'), 'fd00::1');
  t.is(addressHost('cp.svc:15010'), 'cp.svc');
});

test('a TLS address without mesh roots is refused with ZM_ERR_XDS_TLS_REFUSED', (t) => {
  const e = t.throws(() => controlPlaneCredentials('10.0.0.1:15010', { roots: () => [], generation: 0 }));
  t.regex(e.message, /ZM_ERR_XDS_TLS_REFUSED|no mesh roots/);
  t.notThrows(() => controlPlaneCredentials('127.0.0.1:15010', undefined));
});

test('the serving certificate names the Service and the listen IP, no other name', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const s = await ca.issueServing({
    dnsNames: ['zmesh-control-plane.zmesh-system.svc'],
    ips: ['10.255.0.1', 'fd00:255::1'],
    ttlSeconds: 3600,
  });
  const leaf = new X509Certificate(s.certChainPem[0]!);
  t.true(leaf.verify(new X509Certificate(ca.rootPem).publicKey));
  t.regex(leaf.subjectAltName ?? '', /DNS:zmesh-control-plane\.zmesh-system\.svc/);
  t.regex(leaf.subjectAltName ?? '', /IP Address:10\.255\.0\.1/);
  t.regex(leaf.subjectAltName ?? '', /IP Address:FD00:255:0:0:0:0:0:1/i);
  const peer = { subject: {}, subjectaltname: leaf.subjectAltName } as Parameters<
    typeof checkServerIdentity
  >[1];
  t.is(checkServerIdentity('zmesh-control-plane.zmesh-system.svc', peer), undefined);
  t.is(checkServerIdentity('10.255.0.1', peer), undefined);
  t.truthy(checkServerIdentity('other.zmesh-system.svc', peer));
  await t.throwsAsync(() => ca.issueServing({ dnsNames: ['bad name'], ips: [], ttlSeconds: 60 }), {
    message: /not a DNS name/,
  });
});

test('handshake failures at a TLS address are told apart from an unreachable one', (t) => {
  const wrong =
    'No connection established. Last error: Error: 40:error:0A00010B:SSL routines::wrong version number. Resolution note: ';
  t.is(tlsFailure('10.0.0.1:15010', { code: 14, details: wrong }), 'not a TLS server (wrong version number)');
  t.is(
    tlsFailure('10.0.0.1:15010', {
      code: 14,
      details:
        'No connection established. Last error: Error: self-signed certificate in certificate chain. Resolution note: ',
    }),
    'self-signed certificate in certificate chain',
  );
  t.is(
    tlsFailure('10.0.0.1:15010', {
      code: 14,
      details: 'No connection established. Last error: connect ECONNREFUSED',
    }),
    undefined,
  );
  t.is(tlsFailure('127.0.0.1:15010', { code: 14, details: wrong }), undefined);
});

test('ControlPlaneChannels: a TLS channel is remade when the mesh roots move, a plaintext one is kept', async (t) => {
  const first = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [first.rootPem]);
  const channels = new ControlPlaneChannels(['10.0.0.1:15010', '127.0.0.1:15010'], { roots: bundle });
  t.teardown(() => channels.close());
  const tls = channels.get(0);
  const plain = channels.get(1);
  t.is(channels.get(0), tls, 'same roots, same channel');
  const next = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  bundle.add(next.rootPem);
  const remade = channels.get(0);
  t.not(remade, tls, 'a root rotated in: the next handshake is made from the new roots');
  t.is(channels.get(0), remade);
  t.is(channels.get(1), plain, 'loopback is plaintext: no roots involved');
  bundle.remove(first.rootPem);
  t.not(channels.get(0), remade, 'a root rotated out as well');
});
