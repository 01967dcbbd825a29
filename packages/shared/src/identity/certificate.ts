import { createHash, type KeyObject, sign, X509Certificate } from 'node:crypto';
import { err, ok, type Result } from '../result.js';
import {
  bitString,
  boolean,
  children,
  contents,
  context,
  expect,
  flagsOf,
  inside,
  namedBits,
  octetString,
  oid,
  readBits,
  readBoolean,
  readOid,
  readTime,
  sequence,
  setOf,
  smallInteger,
  TAG,
  type Tlv,
  time,
  tlv,
  toPem,
  unsignedInteger,
  utf8String,
  whole,
} from './der.js';

/** RFC 5280 §4.2.1.3: bit n of the KeyUsage BIT STRING is flag 1 << n. */
export const KeyUsage = {
  digitalSignature: 1 << 0,
  keyCertSign: 1 << 5,
  cRLSign: 1 << 6,
} as const;

export const OIDS = {
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  authorityKeyIdentifier: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  organization: '2.5.4.10',
  commonName: '2.5.4.3',
  /** PKCS#9 extensionRequest: the extensions a CSR asks for (RFC 2986 §4.1, RFC 2985 §5.4.2). */
  extensionRequest: '1.2.840.113549.1.9.14',
} as const;

export interface Extension {
  critical: boolean;
  /** The extnValue OCTET STRING's contents: the extension's own DER. */
  value: Buffer;
}

/** uniformResourceIdentifier [6] IMPLICIT IA5String, a GeneralName (RFC 5280 §4.2.1.6). */
const URI_NAME = context(6, false);
/** dNSName [2] IMPLICIT IA5String and iPAddress [7] IMPLICIT OCTET STRING (RFC 5280 §4.2.1.6). */
const DNS_NAME = context(2, false);
const IP_NAME = context(7, false);

/**
 * A parsed X.509 certificate. OpenSSL (node:crypto's X509Certificate) parses it, verifies
 * signatures and checks issuance; this reads what OpenSSL does not expose as values: the
 * extensions by OID with their criticality, the exact subject and key DER, and the dates.
 */
export class Certificate {
  readonly raw: Buffer;
  readonly x509: X509Certificate;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** The subject Name's DER, copied byte for byte into the issuer field of what this signs. */
  readonly subjectDer: Buffer;
  /** SubjectPublicKeyInfo DER. */
  readonly spki: Buffer;
  readonly extensions: ReadonlyMap<string, Extension>;
  /**
   * The extensions zmesh checks, decoded once here: a certificate whose SAN, basic
   * constraints or key usages do not decode is refused whole by `parse`.
   */
  readonly isCa: boolean;
  readonly keyUsage: { flags: number; critical: boolean } | undefined;
  readonly extendedKeyUsage: readonly string[];
  readonly uriSans: readonly string[];
  /** subjectKeyIdentifier's value (what a certificate this one signs names as its authority). */
  readonly keyId: Buffer;

  private constructor(x509: X509Certificate) {
    this.x509 = x509;
    this.raw = x509.raw;
    const der = this.raw;
    const [tbs] = inside(der, readOneTlv(der), TAG.SEQUENCE);
    const fields = inside(der, tbs, TAG.SEQUENCE);
    // version [0] EXPLICIT is present in every v3 certificate (RFC 5280 §4.1.2.1).
    const at = fields[0]?.tag === context(0, true) ? 1 : 0;
    const [, , , validity, subject, spki, ...rest] = fields.slice(at);
    const [from, to] = inside(der, validity, TAG.SEQUENCE);
    this.notBefore = readTime(der, from);
    this.notAfter = readTime(der, to);
    this.subjectDer = Buffer.from(whole(der, expect(subject, TAG.SEQUENCE)));
    this.spki = Buffer.from(whole(der, expect(spki, TAG.SEQUENCE)));
    const extensions = rest.find((f) => f.tag === context(3, true));
    const ext = extensions === undefined ? new Map<string, Extension>() : readExtensions(der, extensions);
    this.extensions = ext;
    this.isCa = readIsCa(ext.get(OIDS.basicConstraints));
    this.keyUsage = readKeyUsage(ext.get(OIDS.keyUsage));
    this.extendedKeyUsage = readExtendedKeyUsage(ext.get(OIDS.extKeyUsage));
    const san = ext.get(OIDS.subjectAltName);
    this.uriSans = san === undefined ? [] : uriNames(san.value);
    this.keyId = readKeyId(ext.get(OIDS.subjectKeyIdentifier), this.spki);
  }

  /** Parses PEM or DER; never throws. */
  static parse(data: string | Uint8Array): Result<Certificate> {
    try {
      const input = typeof data === 'string' || Buffer.isBuffer(data) ? data : Buffer.from(data);
      return ok(new Certificate(new X509Certificate(input)));
    } catch (e) {
      return err([`unparseable certificate: ${(e as Error).message}`]);
    }
  }

  /** As `parse`, throwing: for certificates this process made or already validated. */
  static from(data: string | Uint8Array): Certificate {
    const cert = Certificate.parse(data);
    if (!cert.ok) throw new Error(cert.error.join('; '));
    return cert.value;
  }

  toPem(): string {
    return toPem(this.raw, 'CERTIFICATE');
  }
}

/** basicConstraints cA (RFC 5280 §4.2.1.9); false when the extension is absent. */
function readIsCa(ext: Extension | undefined): boolean {
  if (ext === undefined) return false;
  const [ca] = inside(ext.value, children(ext.value, 0, ext.value.length)[0], TAG.SEQUENCE);
  return ca?.tag === TAG.BOOLEAN && readBoolean(ext.value, ca);
}

function readKeyUsage(ext: Extension | undefined): { flags: number; critical: boolean } | undefined {
  if (ext === undefined) return undefined;
  const bits = readBits(ext.value, children(ext.value, 0, ext.value.length)[0]);
  return { flags: flagsOf(bits), critical: ext.critical };
}

/** ExtKeyUsage purposes as dotted OIDs (RFC 5280 §4.2.1.12); empty when absent. */
function readExtendedKeyUsage(ext: Extension | undefined): string[] {
  if (ext === undefined) return [];
  const [list] = children(ext.value, 0, ext.value.length);
  return inside(ext.value, list, TAG.SEQUENCE).map((p) => readOid(ext.value, p));
}

/** subjectKeyIdentifier's key ID, or RFC 5280 §4.2.1.2 method 1 over the key when absent. */
function readKeyId(ext: Extension | undefined, spki: Buffer): Buffer {
  if (ext === undefined) return keyIdOf(spki);
  const [id] = children(ext.value, 0, ext.value.length);
  return Buffer.from(contents(ext.value, expect(id, TAG.OCTET_STRING)));
}

function readOneTlv(der: Buffer): Tlv {
  const [only, ...extra] = children(der, 0, der.length);
  if (only === undefined || extra.length > 0) throw new Error('trailing data after certificate');
  return only;
}

/** Extensions ::= SEQUENCE OF Extension; an OID twice is refused (RFC 5280 §4.2). */
function readExtensions(der: Buffer, explicit: Tlv): Map<string, Extension> {
  const out = new Map<string, Extension>();
  const [list] = children(der, explicit.start, explicit.end);
  for (const ext of inside(der, list, TAG.SEQUENCE)) {
    const parts = inside(der, ext, TAG.SEQUENCE);
    if (parts.length !== 2 && parts.length !== 3) throw new Error('malformed extension');
    const id = readOid(der, parts[0]);
    const critical = parts.length === 3 && readBoolean(der, parts[1]!);
    const value = Buffer.from(contents(der, expect(parts.at(-1), TAG.OCTET_STRING)));
    if (out.has(id)) throw new Error(`extension ${id} appears twice`);
    out.set(id, { critical, value });
  }
  return out;
}

/** URI GeneralNames of a GeneralNames SEQUENCE (a SAN extension's value). */
export function uriNames(value: Buffer): string[] {
  const [names] = children(value, 0, value.length);
  return inside(value, names, TAG.SEQUENCE)
    .filter((n) => n.tag === URI_NAME)
    .map((n) => contents(value, n).toString('latin1'));
}

/** RFC 5280 §4.2.1.2 method 1: SHA-1 of the subjectPublicKey BIT STRING's bits. */
function keyIdOf(spki: Buffer): Buffer {
  const [, key] = inside(spki, children(spki, 0, spki.length)[0], TAG.SEQUENCE);
  return createHash('sha1').update(readBits(spki, key)).digest();
}

// --- Building ------------------------------------------------------------------------

/** A Name of one attribute per RDN, UTF8String values (RFC 5280 §4.1.2.4); [] is the empty Name. */
export function name(attributes: ReadonlyArray<readonly [string, string]>): Buffer {
  return sequence(...attributes.map(([type, value]) => setOf(sequence(oid(type), utf8String(value)))));
}

export function extension(id: string, critical: boolean, value: Buffer): Buffer {
  // DEFAULT FALSE is left out when false (X.690 §11.5).
  return sequence(oid(id), ...(critical ? [boolean(true)] : []), octetString(value));
}

export const basicConstraints = (ca: boolean): Buffer =>
  extension(OIDS.basicConstraints, true, sequence(...(ca ? [boolean(true)] : [])));

export const keyUsage = (flags: number): Buffer => extension(OIDS.keyUsage, true, namedBits(flags));

export const extendedKeyUsage = (purposes: readonly string[]): Buffer =>
  extension(OIDS.extKeyUsage, false, sequence(...purposes.map(oid)));

export const uriSubjectAltName = (uris: readonly string[], critical: boolean): Buffer =>
  extension(
    OIDS.subjectAltName,
    critical,
    sequence(...uris.map((u) => tlv(URI_NAME, Buffer.from(u, 'latin1')))),
  );

/**
 * A SAN of DNS names and IP addresses (a TLS server's, e.g. the control plane's serving
 * certificate); `ips` are 4 or 16 raw bytes each.
 */
export const serverSubjectAltName = (
  dns: readonly string[],
  ips: readonly Buffer[],
  critical: boolean,
): Buffer =>
  extension(
    OIDS.subjectAltName,
    critical,
    sequence(
      ...dns.map((d) => tlv(DNS_NAME, Buffer.from(d, 'latin1'))),
      ...ips.map((ip) => tlv(IP_NAME, ip)),
    ),
  );

export const subjectKeyIdentifier = (spki: Buffer): Buffer =>
  extension(OIDS.subjectKeyIdentifier, false, octetString(keyIdOf(spki)));

/** authorityKeyIdentifier with keyIdentifier [0] only (RFC 5280 §4.2.1.1). */
export const authorityKeyIdentifier = (keyId: Buffer): Buffer =>
  extension(OIDS.authorityKeyIdentifier, false, sequence(tlv(context(0, false), keyId)));

export interface CertificateFields {
  serial: Buffer;
  issuer: Buffer;
  subject: Buffer;
  notBefore: Date;
  notAfter: Date;
  spki: Buffer;
  extensions: Buffer[];
}

/** A v3 certificate (RFC 5280 §4.1) signed ecdsa-with-SHA256 by `key`, as DER. */
export function signCertificate(fields: CertificateFields, key: KeyObject): Buffer {
  const algorithm = sequence(oid(OIDS.ecdsaWithSha256)); // parameters absent (RFC 5758 §3.2)
  const tbs = sequence(
    tlv(context(0, true), smallInteger(2)),
    unsignedInteger(fields.serial),
    algorithm,
    fields.issuer,
    sequence(time(fields.notBefore), time(fields.notAfter)),
    fields.subject,
    fields.spki,
    tlv(context(3, true), sequence(...fields.extensions)),
  );
  return sequence(tbs, algorithm, bitString(sign('sha256', tbs, key)));
}

/** A PKCS#10 request (RFC 2986 §4) for `key`, with an empty subject and a URI SAN. */
export function buildCsr(uri: string, key: KeyObject, spki: Buffer): Buffer {
  const extensionRequest = sequence(
    oid(OIDS.extensionRequest),
    setOf(sequence(uriSubjectAltName([uri], false))),
  );
  const info = sequence(smallInteger(0), name([]), spki, tlv(context(0, true), extensionRequest));
  return sequence(info, sequence(oid(OIDS.ecdsaWithSha256)), bitString(sign('sha256', info, key)));
}
