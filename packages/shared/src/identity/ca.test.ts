import test from 'ava';
import { isZmeshError } from '../errors/index.js';
import { CertificateAuthority } from './ca.js';
import { Certificate } from './certificate.js';
import { generateCsr } from './credential.js';
import { fromPem, toPem } from './der.js';
import { validateSvid } from './svid.js';
import { TrustBundle } from './trust-bundle.js';

const TD = 'zmesh.test';
const ID = `spiffe://${TD}/ns/shop/sa/cart`;
const ca = await CertificateAuthority.create({ trustDomain: TD, rootTtlSeconds: 3600 });

function uriSans(pem: string): readonly string[] {
  return Certificate.from(pem).uriSans;
}

test('the identity is the one the CA was told, whatever the CSR asked for', async (t) => {
  const { csrPem } = await generateCsr(`spiffe://${TD}/ns/kube-system/sa/admin`);
  const chain = await ca.signCsr(csrPem, { identity: ID, ttlSeconds: 60 });
  t.deepEqual(uriSans(chain[0]!), [ID]);
  t.is(chain.length, 2);
  t.is(chain[1], ca.rootPem);
  const r = validateSvid(chain, { roots: [ca.rootPem] });
  t.true(r.ok && r.value.identity === ID);
});

test('the TTL is honoured, and capped by the root lifetime', async (t) => {
  const cred = await ca.issue(ID, 120);
  const seconds = (cred.notAfter.getTime() - cred.notBefore.getTime()) / 1000;
  t.true(Math.abs(seconds - 120) <= 1, String(seconds));
  const long = await ca.issue(ID, 10 * 3600);
  t.true(long.notAfter <= Certificate.from(ca.rootPem).notAfter);
});

test('notBefore may be set (expired certificates for tests)', async (t) => {
  const cred = await ca.issue(ID, 1, { notBefore: new Date(Date.now() - 3600_000) });
  t.true(cred.notAfter < new Date());
  const r = validateSvid(cred.certChainPem);
  t.false(r.ok);
});

test('identities outside the trust domain, or not SPIFFE IDs, are refused', async (t) => {
  const { csrPem } = await generateCsr(ID);
  for (const identity of ['spiffe://other.test/ns/a/sa/b', 'spiffe://zmesh.test', 'https://zmesh.test/x']) {
    const e = await t.throwsAsync(ca.signCsr(csrPem, { identity, ttlSeconds: 60 }));
    t.true(isZmeshError(e, 'ZM_ERR_CA_REFUSED'), `${identity}: ${e?.message}`);
  }
});

test('a CSR whose signature does not verify is refused', async (t) => {
  const { csrPem } = await generateCsr(ID);
  const der = fromPem(csrPem, ['CERTIFICATE REQUEST'])!;
  der[der.length - 1]! ^= 0x01; // last octet of the ECDSA signature's s
  const tampered = toPem(der, 'CERTIFICATE REQUEST');
  const e = await t.throwsAsync(ca.signCsr(tampered, { identity: ID, ttlSeconds: 60 }));
  t.true(isZmeshError(e, 'ZM_ERR_CA_REFUSED'));
  t.regex(e!.message, /signature/);
});

test('garbage CSRs and non-positive TTLs are refused', async (t) => {
  const bad = await t.throwsAsync(ca.signCsr('not a csr', { identity: ID, ttlSeconds: 60 }));
  t.true(isZmeshError(bad, 'ZM_ERR_CA_REFUSED'));
  const { csrPem } = await generateCsr(ID);
  const ttl = await t.throwsAsync(ca.signCsr(csrPem, { identity: ID, ttlSeconds: 0 }));
  t.true(isZmeshError(ttl, 'ZM_ERR_CA_REFUSED'));
});

test('a CA loaded from PEM signs leaves its original root verifies', async (t) => {
  const loaded = await CertificateAuthority.fromPem({
    trustDomain: TD,
    keyPem: await ca.exportKeyPem(),
    certPem: ca.rootPem,
  });
  const cred = await loaded.issue(ID, 60);
  t.true(validateSvid(cred.certChainPem, { roots: [ca.rootPem] }).ok);
  const other = await CertificateAuthority.create({ trustDomain: TD });
  const mismatch = await t.throwsAsync(
    CertificateAuthority.fromPem({
      trustDomain: TD,
      keyPem: await other.exportKeyPem(),
      certPem: ca.rootPem,
    }),
  );
  t.true(isZmeshError(mismatch, 'ZM_ERR_CERT_INVALID'));
});

test('an invalid trust domain is refused at creation', async (t) => {
  const e = await t.throwsAsync(CertificateAuthority.create({ trustDomain: 'Bad:Domain' }));
  t.true(isZmeshError(e, 'ZM_ERR_SPIFFE_INVALID'));
});

test('a trust bundle holds several roots, dedups, and emits change', async (t) => {
  const other = await CertificateAuthority.create({ trustDomain: TD });
  const bundle = new TrustBundle(TD, [ca.rootPem]);
  let changes = 0;
  bundle.on('change', () => changes++);
  bundle.add(other.rootPem);
  bundle.add(`${other.rootPem}\n`);
  t.is(bundle.roots().length, 2);
  bundle.remove(ca.rootPem);
  bundle.remove(ca.rootPem);
  t.is(bundle.roots().length, 1);
  t.is(changes, 2);
  const leaf = (await ca.issue(ID, 60)).certChainPem[0]!;
  t.true(
    isZmeshError(
      t.throws(() => bundle.add(leaf)),
      'ZM_ERR_CERT_INVALID',
    ),
  );
});
