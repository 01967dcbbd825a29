import { generateKeyPairSync, sign } from 'node:crypto';

/**
 * Test-only: a real ECDSA P-256 PKCS#10 request (RFC 2986) with the given URI SANs,
 * DER-encoded by hand so tests need no certificate library.
 */
export function testCsr(uris: readonly string[]): string {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  const generalNames = seq(...uris.map((u) => tlv(0x86, Buffer.from(u, 'ascii'))));
  const san = seq(oid('2.5.29.17'), tlv(0x04, generalNames));
  const extensionRequest = seq(oid('1.2.840.113549.1.9.14'), tlv(0x31, seq(san)));
  const attributes = tlv(0xa0, uris.length > 0 ? extensionRequest : Buffer.alloc(0));
  const info = seq(Buffer.from([0x02, 0x01, 0x00]), seq(), spki, attributes);
  const signature = sign('sha256', info, privateKey);
  const der = seq(
    info,
    seq(oid('1.2.840.10045.4.3.2')),
    tlv(0x03, Buffer.concat([Buffer.from([0]), signature])),
  );
  const b64 = der.toString('base64').replace(/(.{64})/g, '$1\n');
  return `-----BEGIN CERTIFICATE REQUEST-----\n${b64}\n-----END CERTIFICATE REQUEST-----\n`;
}

function tlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  const len = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, n >> 8, n & 0xff];
  return Buffer.concat([Buffer.from([tag, ...len]), content]);
}

function seq(...parts: Buffer[]): Buffer {
  return tlv(0x30, Buffer.concat(parts));
}

function oid(text: string): Buffer {
  const [a, b, ...rest] = text.split('.').map(Number) as [number, number, ...number[]];
  const bytes = [a * 40 + b];
  for (const v of rest) {
    const chunk = [v & 0x7f];
    for (let x = v >> 7; x > 0; x >>= 7) chunk.unshift((x & 0x7f) | 0x80);
    bytes.push(...chunk);
  }
  return tlv(0x06, Buffer.from(bytes));
}
