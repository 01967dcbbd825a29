import { createPublicKey, type KeyObject, verify } from 'node:crypto';
import { err, ok, type Result } from '../result.js';
import { OIDS, uriNames } from './certificate.js';
import {
  children,
  contents,
  context,
  expect,
  fromPem,
  inside,
  readBits,
  readOid,
  TAG,
  whole,
} from './der.js';

/** A CSR is a few hundred bytes; anything far larger is not one we should parse. */
export const MAX_CSR_PEM_BYTES = 16 * 1024;

/** signatureAlgorithm OID → hash for node's verify (null: the algorithm fixes its own hash). */
const SIGNATURE_HASH: Record<string, string | null> = {
  [OIDS.ecdsaWithSha256]: 'sha256',
  '1.2.840.10045.4.3.3': 'sha384', // ecdsa-with-SHA384
  '1.2.840.113549.1.1.11': 'sha256', // sha256WithRSAEncryption
  '1.2.840.113549.1.1.12': 'sha384', // sha384WithRSAEncryption
  '1.3.101.112': null, // Ed25519
};

export interface CertificateRequest {
  /** SubjectPublicKeyInfo DER. */
  spki: Buffer;
  publicKey: KeyObject;
  /** The URI names of the extensionRequest's subjectAltName, if it asks for any. */
  uriSans: string[];
}

/**
 * A PKCS#10 request (RFC 2986) whose self-signature over certificationRequestInfo
 * verifies (§4.2: proof that the requester holds the key). Never throws.
 */
export function parseCsr(pem: string): Result<CertificateRequest> {
  if (pem.length > MAX_CSR_PEM_BYTES) return err([`csr: larger than ${MAX_CSR_PEM_BYTES} bytes`]);
  const der = fromPem(pem, ['CERTIFICATE REQUEST', 'NEW CERTIFICATE REQUEST']);
  if (der === undefined) return err(['csr: no PEM CERTIFICATE REQUEST block']);
  try {
    const [request, ...extra] = children(der, 0, der.length);
    if (extra.length > 0) return err(['csr: trailing data']);
    const [info, algorithm, signature] = inside(der, request, TAG.SEQUENCE);
    const [, , spkiTlv, attributes] = inside(der, info, TAG.SEQUENCE);
    const algorithmOid = readOid(der, inside(der, algorithm, TAG.SEQUENCE)[0]);
    const hash = SIGNATURE_HASH[algorithmOid];
    if (hash === undefined) return err([`csr: unsupported signature algorithm ${algorithmOid}`]);
    const spki = Buffer.from(whole(der, expect(spkiTlv, TAG.SEQUENCE)));
    const publicKey = createPublicKey({ key: spki, format: 'der', type: 'spki' });
    if (!verify(hash, whole(der, info!), publicKey, readBits(der, signature))) {
      return err(['csr: signature does not verify']);
    }
    const uriSans = attributes?.tag === context(0, true) ? requestedUris(der, attributes) : [];
    return ok({ spki, publicKey, uriSans });
  } catch (e) {
    return err([`csr: malformed DER: ${(e as Error).message}`]);
  }
}

/** attributes [0] → Attribute{extensionRequest} → SET → Extensions → subjectAltName → GeneralNames. */
function requestedUris(der: Buffer, attributes: { start: number; end: number }): string[] {
  const uris: string[] = [];
  for (const attribute of children(der, attributes.start, attributes.end)) {
    const [type, values] = inside(der, attribute, TAG.SEQUENCE);
    if (readOid(der, type) !== OIDS.extensionRequest) continue;
    for (const extensions of inside(der, values, TAG.SET)) {
      for (const ext of inside(der, extensions, TAG.SEQUENCE)) {
        const parts = inside(der, ext, TAG.SEQUENCE);
        if (readOid(der, parts[0]) !== OIDS.subjectAltName) continue;
        uris.push(...uriNames(contents(der, expect(parts.at(-1), TAG.OCTET_STRING))));
      }
    }
  }
  return uris;
}
