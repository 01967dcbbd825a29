import { createPrivateKey, createPublicKey, generateKeyPair, type KeyObject, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

/**
 * Which code does what (ECDSA P-256 everywhere, docs/design.md §4):
 * - node:crypto generates and imports keys, makes and verifies every signature, and
 *   (its X509Certificate, i.e. OpenSSL) parses certificates and checks chain links;
 * - der.ts and certificate.ts encode the certificates and CSRs zmesh issues and read the
 *   extensions OpenSSL does not expose as values (ARCHITECTURE.md, Decisions, "PKI").
 */

export interface KeyPair {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

const generate = promisify(generateKeyPair);

/** A fresh ECDSA P-256 key pair (off the event loop, in libuv's thread pool). */
export async function generateP256(): Promise<KeyPair> {
  return generate('ec', { namedCurve: 'P-256' });
}

export function isP256(key: KeyObject): boolean {
  return key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1';
}

/** SubjectPublicKeyInfo DER of a public key, or of a private key's public half. */
export function spkiOf(key: KeyObject): Buffer {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  return pub.export({ type: 'spki', format: 'der' });
}

export function exportKeyPem(key: KeyObject): string {
  return key.export({ type: 'pkcs8', format: 'pem' }) as string;
}

/** A P-256 private key from PEM (PKCS#8 or SEC1); throws when it is anything else. */
export function importKeyPem(pem: string): KeyObject {
  const key = createPrivateKey(pem);
  if (!isP256(key)) throw new Error('key is not ECDSA P-256');
  return key;
}

/** A positive, non-zero 128-bit serial (RFC 5280 §4.1.2.2: ≤ 20 octets, positive). */
export function randomSerial(): Buffer {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return bytes;
}
