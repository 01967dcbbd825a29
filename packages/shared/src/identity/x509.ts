/**
 * Which library does what (ECDSA P-256 everywhere, DESIGN §4):
 * - Node's webcrypto generates and imports P-256 keys and makes every signature.
 * - @peculiar/x509 builds and parses certificates and CSRs (extensions, SANs) on top of it.
 * - Node's crypto.X509Certificate verifies chain links synchronously (validateSvid).
 * - node-forge is not used: it has no ECDSA, and nothing here needs RSA.
 */
import './reflect-polyfill.js';
import { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as never);

// Node's webcrypto types; the lib has no DOM globals (tsconfig lib ES2023).
export type Key = webcrypto.CryptoKey;
export type KeyPair = webcrypto.CryptoKeyPair;

export { x509 };

/** P-256 key generation/import parameters; also the signing algorithm with SHA-256. */
export const EC_P256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

export const subtle = webcrypto.subtle;

export async function exportKeyPem(key: Key): Promise<string> {
  const der = await subtle.exportKey('pkcs8', key);
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

export async function importKeyPem(pem: string): Promise<Key> {
  const der = x509.PemConverter.decode(pem)[0];
  if (der === undefined) throw new Error('no PEM block in key');
  const key = await subtle.importKey('pkcs8', der, EC_P256, false, ['sign']);
  return key;
}

/** A positive, non-zero 128-bit serial in hex (RFC 5280 §4.1.2.2: ≤ 20 octets, positive). */
export function randomSerial(): string {
  const bytes = webcrypto.getRandomValues(new Uint8Array(16));
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return Buffer.from(bytes).toString('hex');
}
