import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { CertificateAuthority } from './ca.js';
import { Certificate, extension, KeyUsage, name, OIDS, signCertificate } from './certificate.js';
import { generateCsr } from './credential.js';
import { parseCsr } from './csr.js';
import { generateP256, randomSerial, spkiOf } from './keys.js';

/**
 * The encoder and reader here are zmesh's own, so these tests hold them against an
 * independent implementation: the openssl command line parses, prints and verifies what
 * zmesh issues, and zmesh reads what openssl issues.
 */
const TD = 'zmesh.test';
const ID = `spiffe://${TD}/ns/shop/sa/cart`;
// Every await comes before the first test is declared (ava registers tests synchronously).
const ca = await CertificateAuthority.create({ trustDomain: TD, rootTtlSeconds: 3600 });
const leaf = await ca.issue(ID, 600);
const dir = mkdtempSync(join(tmpdir(), 'zmesh-cert-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

function openssl(args: string[]): string | undefined {
  try {
    return execFileSync('openssl', args, { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    const err = e as { code?: string; stdout?: string; stderr?: string };
    if (err.code === 'ENOENT') return undefined;
    throw new Error(`openssl ${args.join(' ')}: ${err.stdout ?? ''}${err.stderr ?? ''}`);
  }
}
const haveOpenssl = openssl(['version']) !== undefined;
/** The openssl checks, reported as skipped with the reason where the command is missing. */
function withOpenssl(title: string, fn: (t: ExecutionContext) => void | Promise<void>): void {
  if (haveOpenssl) test(title, fn);
  else test.skip(`${title} (skipped: no openssl command; scripts/bootstrap.sh installs it)`, fn);
}

writeFileSync(join(dir, 'root.pem'), ca.rootPem);
writeFileSync(join(dir, 'leaf.pem'), leaf.certChainPem[0]!);

withOpenssl('openssl verifies the leaf for TLS server and client use under the root', (t) => {
  for (const purpose of ['sslserver', 'sslclient']) {
    const out = openssl(['verify', '-CAfile', 'root.pem', '-purpose', purpose, '-x509_strict', 'leaf.pem']);
    t.regex(out!, /leaf\.pem: OK/);
  }
});

withOpenssl('openssl reads the extensions zmesh wrote, with their criticality', (t) => {
  const text = openssl(['x509', '-in', 'leaf.pem', '-noout', '-text'])!;
  t.regex(text, /Version: 3/);
  t.regex(text, /Signature Algorithm: ecdsa-with-SHA256/);
  t.regex(text, /X509v3 Basic Constraints: critical\s+CA:FALSE/);
  t.regex(text, /X509v3 Key Usage: critical\s+Digital Signature\n/);
  t.regex(text, /X509v3 Extended Key Usage:\s+TLS Web Server Authentication, TLS Web Client Authentication/);
  t.regex(text, new RegExp(`X509v3 Subject Alternative Name: critical\\s+URI:${ID}\\n`));
  const root = Certificate.from(ca.rootPem);
  const aki = /X509v3 Authority Key Identifier:\s+(?:keyid:)?([0-9A-F:]+)/.exec(text)?.[1]?.replace(/:/g, '');
  t.is(aki?.toLowerCase(), root.keyId.toString('hex'));
  const rootText = openssl(['x509', '-in', 'root.pem', '-noout', '-text'])!;
  t.regex(rootText, /X509v3 Basic Constraints: critical\s+CA:TRUE/);
  t.regex(rootText, /X509v3 Key Usage: critical\s+Digital Signature, Certificate Sign, CRL Sign/);
  t.regex(rootText, /Subject: O = zmesh, CN = zmesh.test root/);
});

withOpenssl('openssl verifies the CSR zmesh builds and reads its URI SAN', (t) => {
  return generateCsr(ID).then(({ csrPem }) => {
    writeFileSync(join(dir, 'req.pem'), csrPem);
    const out = openssl(['req', '-in', 'req.pem', '-verify', '-noout', '-text']);
    t.regex(out!, new RegExp(`URI:${ID}`));
    t.regex(out!, /ASN1 OID: prime256v1/);
  });
});

withOpenssl('zmesh reads a certificate and a CSR that openssl made', (t) => {
  openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'key.pem']);
  const ext = [
    '-addext',
    `subjectAltName=critical,URI:${ID},DNS:example.test`,
    '-addext',
    'keyUsage=critical,digitalSignature,keyAgreement',
    '-addext',
    'extendedKeyUsage=clientAuth,serverAuth',
    '-addext',
    'basicConstraints=critical,CA:FALSE',
  ];
  openssl([
    'req',
    '-new',
    '-x509',
    '-key',
    'key.pem',
    '-subj',
    '/CN=x',
    '-days',
    '1',
    ...ext,
    '-out',
    'o.pem',
  ]);
  const cert = Certificate.from(readFileSync(join(dir, 'o.pem'), 'utf8'));
  t.deepEqual(cert.uriSans, [ID]);
  t.deepEqual(cert.keyUsage, { flags: KeyUsage.digitalSignature | (1 << 4), critical: true });
  t.deepEqual([...cert.extendedKeyUsage].sort(), [OIDS.serverAuth, OIDS.clientAuth].sort());
  t.false(cert.isCa);
  t.is(Math.round((cert.notAfter.getTime() - cert.notBefore.getTime()) / 3600_000), 24);
  openssl([
    'req',
    '-new',
    '-key',
    'key.pem',
    '-subj',
    '/CN=x',
    '-addext',
    `subjectAltName=URI:${ID}`,
    '-out',
    'r.pem',
  ]);
  const csr = parseCsr(readFileSync(join(dir, 'r.pem'), 'utf8'));
  t.true(csr.ok && csr.value.uriSans[0] === ID, csr.ok ? '' : csr.error.join('; '));
});

test('a certificate with an undecodable or repeated extension is refused whole', async (t) => {
  const k = await generateP256();
  const issue = (extensions: Buffer[]) =>
    Certificate.parse(
      signCertificate(
        {
          serial: randomSerial(),
          issuer: name([]),
          subject: name([]),
          notBefore: new Date(),
          notAfter: new Date(Date.now() + 60_000),
          spki: spkiOf(k.publicKey),
          extensions,
        },
        k.privateKey,
      ),
    );
  const ku = extension(OIDS.keyUsage, true, Buffer.from('03020780', 'hex'));
  t.true(issue([ku]).ok);
  const badSan = issue([extension(OIDS.subjectAltName, true, Buffer.from('0400', 'hex'))]);
  t.false(badSan.ok);
  const twice = issue([ku, ku]);
  t.false(twice.ok);
  if (!twice.ok) t.regex(twice.error[0]!, /appears twice|unparseable/);
});

test('what the CA issues reads back through Certificate', (t) => {
  const cert = Certificate.from(leaf.certChainPem[0]!);
  t.deepEqual(cert.uriSans, [ID]);
  t.deepEqual(cert.keyUsage, { flags: KeyUsage.digitalSignature, critical: true });
  t.false(cert.isCa);
  t.true(Certificate.from(ca.rootPem).isCa);
  t.true(cert.x509.checkIssued(Certificate.from(ca.rootPem).x509));
  t.is(cert.notBefore.getTime(), leaf.notBefore.getTime());
});
