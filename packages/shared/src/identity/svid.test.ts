import test from 'ava';
import {
  basicConstraints,
  Certificate,
  extendedKeyUsage,
  extension,
  KeyUsage,
  name,
  OIDS,
  signCertificate,
  uriSubjectAltName,
} from './certificate.js';
import { namedBits, toPem } from './der.js';
import { generateP256, type KeyPair, randomSerial, spkiOf } from './keys.js';
import { validateSvid } from './svid.js';

/** Certificates are built field by field so that each rule can be broken alone. */
const ID = 'spiffe://zmesh.test/ns/a/sa/b';
const HOUR = 3600_000;
const keys = generateP256;

function makeRoot(k: KeyPair, ca = true): Certificate {
  const subject = name([[OIDS.commonName, 'test root']]);
  const der = signCertificate(
    {
      serial: randomSerial(),
      issuer: subject,
      subject,
      notBefore: new Date(Date.now() - HOUR),
      notAfter: new Date(Date.now() + HOUR),
      spki: spkiOf(k.publicKey),
      extensions: [basicConstraints(ca)],
    },
    k.privateKey,
  );
  return Certificate.from(der);
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

async function makeLeaf(issuer: Certificate, issuerKeys: KeyPair, spec: LeafSpec = {}): Promise<string> {
  const k = await keys();
  const extensions = [uriSubjectAltName(spec.uris ?? [ID], true), basicConstraints(spec.ca ?? false)];
  const ku = spec.ku === undefined ? KeyUsage.digitalSignature : spec.ku;
  if (ku !== null) extensions.push(extension(OIDS.keyUsage, spec.kuCritical ?? true, namedBits(ku)));
  const eku = spec.eku === undefined ? [OIDS.serverAuth, OIDS.clientAuth] : spec.eku;
  if (eku !== null) extensions.push(extendedKeyUsage(eku));
  const der = signCertificate(
    {
      serial: randomSerial(),
      issuer: issuer.subjectDer,
      subject: name([]),
      notBefore: spec.notBefore ?? new Date(Date.now() - 60_000),
      notAfter: spec.notAfter ?? new Date(Date.now() + HOUR),
      spki: spkiOf(k.publicKey),
      extensions,
    },
    issuerKeys.privateKey,
  );
  return toPem(der, 'CERTIFICATE');
}

const rootKeys = await keys();
const root = makeRoot(rootKeys);
const rootPem = root.toPem();
/** KeyUsage bit 4 (RFC 5280 §4.2.1.3). */
const KEY_AGREEMENT = 1 << 4;

const rules: [string, LeafSpec, RegExp][] = [
  ['no URI SAN', { uris: [] }, /exactly one URI SAN, has 0/],
  ['two URI SANs', { uris: [ID, 'spiffe://zmesh.test/ns/a/sa/c'] }, /exactly one URI SAN, has 2/],
  ['URI SAN that is not a SPIFFE ID', { uris: ['https://zmesh.test/x'] }, /scheme/],
  ['trust-domain-only SPIFFE ID', { uris: ['spiffe://zmesh.test'] }, /needs a path/],
  ['cA=true on the leaf', { ca: true }, /must not be a CA/],
  ['no keyUsage', { ku: null }, /no keyUsage/],
  ['non-critical keyUsage', { kuCritical: false }, /must be critical/],
  ['keyUsage without digitalSignature', { ku: KEY_AGREEMENT }, /lacks digitalSignature/],
  [
    'keyUsage with keyCertSign',
    { ku: KeyUsage.digitalSignature | KeyUsage.keyCertSign },
    /keyCertSign or cRLSign/,
  ],
  ['keyUsage with cRLSign', { ku: KeyUsage.digitalSignature | KeyUsage.cRLSign }, /keyCertSign or cRLSign/],
  ['no EKU', { eku: null }, /serverAuth and clientAuth/],
  ['EKU serverAuth only', { eku: [OIDS.serverAuth] }, /serverAuth and clientAuth/],
  ['EKU clientAuth only', { eku: [OIDS.clientAuth] }, /serverAuth and clientAuth/],
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
  const notCa = makeRoot(k, false);
  const r = validateSvid([await makeLeaf(notCa, k), notCa.toPem()]);
  t.false(r.ok);
  if (!r.ok)
    t.true(
      r.error.some((e) => /chain\[1\] is not a CA/.test(e)),
      r.error.join('; '),
    );
});

test('refused: chain not anchored in the given roots', async (t) => {
  const otherRoot = makeRoot(await keys());
  const r = validateSvid([await makeLeaf(root, rootKeys), rootPem], { roots: [otherRoot.toPem()] });
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
