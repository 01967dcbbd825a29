import { createPublicKey, verify } from 'node:crypto';
import { err, ok, type Result } from '../result.js';

/** A CSR is a few hundred bytes; anything far larger is not one we should parse. */
export const MAX_CSR_PEM_BYTES = 16 * 1024;

const OID_EXTENSION_REQUEST = '1.2.840.113549.1.9.14';
const OID_SUBJECT_ALT_NAME = '2.5.29.17';
/** signatureAlgorithm OID → hash for node's verify (null: the algorithm fixes its own hash). */
const SIGNATURE_HASH: Record<string, string | null> = {
  '1.2.840.10045.4.3.2': 'sha256', // ecdsa-with-SHA256
  '1.2.840.10045.4.3.3': 'sha384', // ecdsa-with-SHA384
  '1.2.840.113549.1.1.11': 'sha256', // sha256WithRSAEncryption
  '1.2.840.113549.1.1.12': 'sha384', // sha384WithRSAEncryption
  '1.3.101.112': null, // Ed25519
};

/**
 * What the CA service needs from a PKCS#10 request (RFC 2986): proof that the requester
 * holds the key (the self-signature over certificationRequestInfo, §4.2) and the URI SANs
 * of its extensionRequest attribute. A small DER reader, because @peculiar/x509 needs a
 * reflect-metadata polyfill at load time and node-forge cannot read EC requests.
 */
export function csrUriSans(pem: string): Result<string[]> {
  if (pem.length > MAX_CSR_PEM_BYTES) return err([`csr: larger than ${MAX_CSR_PEM_BYTES} bytes`]);
  const match =
    /-----BEGIN (?:NEW )?CERTIFICATE REQUEST-----([\s\S]+?)-----END (?:NEW )?CERTIFICATE REQUEST-----/.exec(
      pem,
    );
  if (match === null) return err(['csr: no PEM CERTIFICATE REQUEST block']);
  try {
    const der = Buffer.from(match[1]!.replace(/\s+/g, ''), 'base64');
    const [request] = children(der, 0, der.length);
    const [info, algorithm, signature] = children(der, request!.start, request!.end);
    const [, , spki, attributes] = children(der, info!.start, info!.end);
    const oid = readOid(der, children(der, algorithm!.start, algorithm!.end)[0]!);
    const hash = SIGNATURE_HASH[oid];
    if (hash === undefined) return err([`csr: unsupported signature algorithm ${oid}`]);
    const key = createPublicKey({ key: der.subarray(spki!.header, spki!.end), format: 'der', type: 'spki' });
    // BIT STRING content starts with the count of unused bits (0 for signatures).
    const sig = der.subarray(signature!.start + 1, signature!.end);
    if (!verify(hash, der.subarray(info!.header, info!.end), key, sig))
      return err(['csr: signature does not verify']);
    return ok(attributes?.tag === 0xa0 ? uriSans(der, attributes) : []);
  } catch (e) {
    return err([`csr: malformed DER: ${(e as Error).message}`]);
  }
}

/** The CSR's SubjectPublicKeyInfo as DER (RFC 2986 §4.1), so a returned leaf can be matched to it. */
export function csrPublicKey(pem: string): Result<Buffer> {
  const match =
    /-----BEGIN (?:NEW )?CERTIFICATE REQUEST-----([\s\S]+?)-----END (?:NEW )?CERTIFICATE REQUEST-----/.exec(
      pem.slice(0, MAX_CSR_PEM_BYTES),
    );
  if (match === null) return err(['csr: no PEM CERTIFICATE REQUEST block']);
  try {
    const der = Buffer.from(match[1]!.replace(/\s+/g, ''), 'base64');
    const [request] = children(der, 0, der.length);
    const [info] = children(der, request!.start, request!.end);
    const [, , spki] = children(der, info!.start, info!.end);
    return ok(Buffer.from(der.subarray(spki!.header, spki!.end)));
  } catch (e) {
    return err([`csr: malformed DER: ${(e as Error).message}`]);
  }
}

interface Tlv {
  tag: number;
  /** Offset of the tag byte. */
  header: number;
  start: number;
  end: number;
}

function readTlv(der: Buffer, at: number): Tlv {
  const tag = der[at]!;
  let len = der[at + 1]!;
  let start = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4) throw new Error('unsupported length encoding');
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + der[start + i]!;
    start += n;
  }
  const end = start + len;
  if (end > der.length || start > der.length) throw new Error('length runs past the end');
  return { tag, header: at, start, end };
}

function children(der: Buffer, start: number, end: number): Tlv[] {
  const out: Tlv[] = [];
  for (let at = start; at < end; ) {
    const tlv = readTlv(der, at);
    if (tlv.end > end) throw new Error('child runs past its parent');
    out.push(tlv);
    at = tlv.end;
  }
  return out;
}

function readOid(der: Buffer, tlv: Tlv): string {
  if (tlv.tag !== 0x06) throw new Error('expected an OBJECT IDENTIFIER');
  const bytes = der.subarray(tlv.start, tlv.end);
  const parts = [Math.floor(bytes[0]! / 40), bytes[0]! % 40];
  let value = 0;
  for (const b of bytes.subarray(1)) {
    value = value * 128 + (b & 0x7f);
    if (!(b & 0x80)) {
      parts.push(value);
      value = 0;
    }
  }
  return parts.join('.');
}

/** attributes [0] → Attribute{extensionRequest} → SET → Extensions → subjectAltName → GeneralNames. */
function uriSans(der: Buffer, attributes: Tlv): string[] {
  const uris: string[] = [];
  for (const attribute of children(der, attributes.start, attributes.end)) {
    const [type, values] = children(der, attribute.start, attribute.end);
    if (readOid(der, type!) !== OID_EXTENSION_REQUEST) continue;
    for (const extensions of children(der, values!.start, values!.end)) {
      for (const ext of children(der, extensions.start, extensions.end)) {
        const parts = children(der, ext.start, ext.end);
        if (readOid(der, parts[0]!) !== OID_SUBJECT_ALT_NAME) continue;
        const value = parts[parts.length - 1]!; // OCTET STRING holding GeneralNames
        const [names] = children(der, value.start, value.end);
        for (const name of children(der, names!.start, names!.end)) {
          // uniformResourceIdentifier [6] IMPLICIT IA5String (RFC 5280 §4.2.1.6)
          if (name.tag === 0x86) uris.push(der.subarray(name.start, name.end).toString('ascii'));
        }
      }
    }
  }
  return uris;
}
