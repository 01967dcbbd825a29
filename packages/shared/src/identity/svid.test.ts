import test from 'ava';
import { validateSvid } from './svid.js';
import { EC_P256, type KeyPair, subtle, x509 } from './x509.js';

/** Certificates are crafted directly with @peculiar/x509 so each rule can be broken alone. */
const ID = 'spiffe://zmesh.test/ns/a/sa/b';
const HOUR = 3600_000;

async function keys(): Promise<KeyPair> {
  return (await subtle.generateKey(EC_P256, true, ['sign', 'verify'])) as KeyPair;
}

async function makeRoot(k: KeyPair, ca = true): Promise<x509.X509Certificate> {
  return x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=test root',
    keys: k,
    notBefore: new Date(Date.now() - HOUR),
    notAfter: new Date(Date.now() + HOUR),
    signingAlgorithm: EC_P256,
    extensions: [new x509.BasicConstraintsExtension(ca, undefined, true)],
  });
}

interface LeafSpec {
  uris?: string[];
  ca?: boolean;
  ku?: number | null;
  kuCritical?: boolean;
  eku?: string[] | null;
  notBefore?: Date;
  notAfter?: Date;
}

async function makeLeaf(issuer: x509.X509Certificate, issuerKeys: KeyPair, spec: LeafSpec = {}) {
  const k = await keys();
  const extensions: x509.Extension[] = [
    new x509.SubjectAlternativeNameExtension(
      (spec.uris ?? [ID]).map((value) => ({ type: 'url' as const, value })),
      true,
    ),
    new x509.BasicConstraintsExtension(spec.ca ?? false, undefined, true),
  ];
  const ku = spec.ku === undefined ? x509.KeyUsageFlags.digitalSignature : spec.ku;
  if (ku !== null) extensions.push(new x509.KeyUsagesExtension(ku, spec.kuCritical ?? true));
  const eku =
    spec.eku === undefined ? [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth] : spec.eku;
  if (eku !== null) extensions.push(new x509.ExtendedKeyUsageExtension(eku));
  const cert = await x509.X509CertificateGenerator.create({
    subject: '',
    issuer: issuer.subjectName,
    publicKey: k.publicKey,
    signingKey: issuerKeys.privateKey,
    notBefore: spec.notBefore ?? new Date(Date.now() - 60_000),
    notAfter: spec.notAfter ?? new Date(Date.now() + HOUR),
    signingAlgorithm: EC_P256,
    extensions,
  });
  return cert.toString('pem');
}

const rootKeys = await keys();
const root = await makeRoot(rootKeys);
const rootPem = root.toString('pem');
const { KeyUsageFlags: KU } = x509;

const rules: [string, LeafSpec, RegExp][] = [
  ['no URI SAN', { uris: [] }, /exactly one URI SAN, has 0/],
  ['two URI SANs', { uris: [ID, 'spiffe://zmesh.test/ns/a/sa/c'] }, /exactly one URI SAN, has 2/],
  ['URI SAN that is not a SPIFFE ID', { uris: ['https://zmesh.test/x'] }, /scheme/],
  ['trust-domain-only SPIFFE ID', { uris: ['spiffe://zmesh.test'] }, /needs a path/],
  ['cA=true on the leaf', { ca: true }, /must not be a CA/],
  ['no keyUsage', { ku: null }, /no keyUsage/],
  ['non-critical keyUsage', { kuCritical: false }, /must be critical/],
  ['keyUsage without digitalSignature', { ku: KU.keyAgreement }, /lacks digitalSignature/],
  ['keyUsage with keyCertSign', { ku: KU.digitalSignature | KU.keyCertSign }, /keyCertSign or cRLSign/],
  ['keyUsage with cRLSign', { ku: KU.digitalSignature | KU.cRLSign }, /keyCertSign or cRLSign/],
  ['no EKU', { eku: null }, /serverAuth and clientAuth/],
  ['EKU serverAuth only', { eku: [x509.ExtendedKeyUsage.serverAuth] }, /serverAuth and clientAuth/],
  ['EKU clientAuth only', { eku: [x509.ExtendedKeyUsage.clientAuth] }, /serverAuth and clientAuth/],
  [
    'expired',
    { notBefore: new Date(Date.now() - 2 * HOUR), notAfter: new Date(Date.now() - HOUR) },
    /expired at/,
  ],
  [
    'not yet valid',
    { notBefore: new Date(Date.now() + HOUR), notAfter: new Date(Date.now() + 2 * HOUR) },
    /not valid before/,
  ],
];

test('a well-formed SVID passes and reports identity and window', async (t) => {
  const leaf = await makeLeaf(root, rootKeys);
  const r = validateSvid([leaf, rootPem], { roots: [rootPem] });
  if (!r.ok) return t.fail(r.error.join('; '));
  t.is(r.value.identity, ID);
  t.true(r.value.notAfter > new Date());
});

for (const [name, spec, reason] of rules) {
  test(`refused: ${name}`, async (t) => {
    const r = validateSvid([await makeLeaf(root, rootKeys, spec), rootPem]);
    t.false(r.ok);
    if (!r.ok)
      t.true(
        r.error.some((e) => reason.test(e)),
        r.error.join('; '),
      );
  });
}

test('refused: leaf signed by a different key than the next cert', async (t) => {
  const otherKeys = await keys();
  const r = validateSvid([await makeLeaf(root, otherKeys), rootPem]);
  t.false(r.ok);
  if (!r.ok)
    t.true(
      r.error.some((e) => /not signed by chain\[1\]/.test(e)),
      r.error.join('; '),
    );
});

test('refused: issuer in the chain that is not a CA', async (t) => {
  const k = await keys();
  const notCa = await makeRoot(k, false);
  const r = validateSvid([await makeLeaf(notCa, k), notCa.toString('pem')]);
  t.false(r.ok);
  if (!r.ok)
    t.true(
      r.error.some((e) => /chain\[1\] is not a CA/.test(e)),
      r.error.join('; '),
    );
});

test('refused: chain not anchored in the given roots', async (t) => {
  const otherRoot = await makeRoot(await keys());
  const r = validateSvid([await makeLeaf(root, rootKeys), rootPem], { roots: [otherRoot.toString('pem')] });
  t.false(r.ok);
  if (!r.ok)
    t.true(
      r.error.some((e) => /trusted root/.test(e)),
      r.error.join('; '),
    );
});

test('the validity window is judged at opts.now', async (t) => {
  const leaf = await makeLeaf(root, rootKeys);
  t.true(validateSvid([leaf]).ok);
  t.false(validateSvid([leaf], { now: new Date(Date.now() + 2 * HOUR) }).ok);
});

test('empty and unparseable chains are refused, not thrown', (t) => {
  t.false(validateSvid([]).ok);
  const r = validateSvid(['-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----']);
  t.false(r.ok);
  if (!r.ok) t.regex(r.error[0]!, /chain\[0\]: unparseable/);
});
