/**
 * DER (ITU-T X.690 §8, §10): the encoding of certificates and CSRs. The writer builds the
 * few structures zmesh issues (RFC 5280 certificates, RFC 2986 requests); the reader walks
 * structures that OpenSSL has already parsed (certificates) or that are bounded in size
 * and self-signed (CSRs). Both are strict: definite lengths only, every child inside its
 * parent, and a reader error is thrown as a plain Error for the caller to turn into reasons.
 */

export const TAG = {
  BOOLEAN: 0x01,
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  NULL: 0x05,
  OID: 0x06,
  UTF8_STRING: 0x0c,
  UTC_TIME: 0x17,
  GENERALIZED_TIME: 0x18,
  SEQUENCE: 0x30,
  SET: 0x31,
} as const;

/** Context-specific tag number n (X.690 §8.1.2): constructed (EXPLICIT or a SEQUENCE) or primitive. */
export const context = (n: number, constructed: boolean): number => (constructed ? 0xa0 : 0x80) | n;

/** One TLV inside a buffer: the tag, where its header starts, and its contents [start, end). */
export interface Tlv {
  tag: number;
  header: number;
  start: number;
  end: number;
}

/** Longest length field read (4 octets: 4 GiB), far beyond any certificate. */
const MAX_LENGTH_OCTETS = 4;

export function readTlv(der: Uint8Array, at: number): Tlv {
  if (at + 2 > der.length) throw new Error('truncated header');
  const tag = der[at]!;
  // High tag numbers (X.690 §8.1.2.4) appear in nothing zmesh reads.
  if ((tag & 0x1f) === 0x1f) throw new Error('multi-byte tag');
  let len = der[at + 1]!;
  let start = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    // n = 0 is the indefinite form, which DER forbids (X.690 §10.1).
    if (n === 0 || n > MAX_LENGTH_OCTETS) throw new Error('unsupported length encoding');
    if (start + n > der.length) throw new Error('truncated length');
    // DER lengths are minimal (X.690 §10.1): no leading zero octet, no long form below 128.
    if (der[start] === 0) throw new Error('non-minimal length');
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + der[start + i]!;
    if (len < 0x80) throw new Error('non-minimal length');
    start += n;
  }
  const end = start + len;
  if (end > der.length) throw new Error('length runs past the end');
  return { tag, header: at, start, end };
}

/** The TLVs laid end to end in [start, end). */
export function children(der: Uint8Array, start: number, end: number): Tlv[] {
  const out: Tlv[] = [];
  for (let at = start; at < end; ) {
    const tlv = readTlv(der, at);
    if (tlv.end > end) throw new Error('child runs past its parent');
    out.push(tlv);
    at = tlv.end;
  }
  return out;
}

/** The children of a constructed TLV, checking its tag. */
export function inside(der: Uint8Array, tlv: Tlv | undefined, tag: number): Tlv[] {
  return children(der, expect(tlv, tag).start, tlv!.end);
}

export function expect(tlv: Tlv | undefined, tag: number): Tlv {
  if (tlv === undefined) throw new Error(`missing element (tag 0x${tag.toString(16)})`);
  if (tlv.tag !== tag) throw new Error(`expected tag 0x${tag.toString(16)}, found 0x${tlv.tag.toString(16)}`);
  return tlv;
}

export function contents(der: Uint8Array, tlv: Tlv): Buffer {
  return Buffer.from(der.buffer, der.byteOffset + tlv.start, tlv.end - tlv.start);
}

/** The whole TLV, header included. */
export function whole(der: Uint8Array, tlv: Tlv): Buffer {
  return Buffer.from(der.buffer, der.byteOffset + tlv.header, tlv.end - tlv.header);
}

export function readOid(der: Uint8Array, tlv: Tlv | undefined): string {
  const bytes = contents(der, expect(tlv, TAG.OID));
  if (bytes.length === 0 || (bytes[bytes.length - 1]! & 0x80) !== 0)
    throw new Error('malformed OBJECT IDENTIFIER');
  const arcs: number[] = [];
  let value = 0;
  for (const b of bytes) {
    value = value * 128 + (b & 0x7f);
    if (!(b & 0x80)) {
      arcs.push(value);
      value = 0;
    }
  }
  // The first subidentifier packs two arcs: 40 * X + Y, with Y unbounded under 2 (X.690 §8.19.4).
  const first = arcs[0]!;
  const parts = first < 80 ? [Math.floor(first / 40), first % 40] : [2, first - 80];
  parts.push(...arcs.slice(1));
  return parts.join('.');
}

export function readBoolean(der: Uint8Array, tlv: Tlv): boolean {
  const bytes = contents(der, expect(tlv, TAG.BOOLEAN));
  // DER: TRUE is 0xff exactly (X.690 §11.1).
  if (bytes.length !== 1 || (bytes[0] !== 0 && bytes[0] !== 0xff)) throw new Error('malformed BOOLEAN');
  return bytes[0] === 0xff;
}

/** A BIT STRING's bits, with its leading unused-bits octet checked and dropped. */
export function readBits(der: Uint8Array, tlv: Tlv | undefined): Buffer {
  const bytes = contents(der, expect(tlv, TAG.BIT_STRING));
  if (bytes.length === 0 || bytes[0]! > 7) throw new Error('malformed BIT STRING');
  return bytes.subarray(1);
}

/** UTCTime or GeneralizedTime in RFC 5280 §4.1.2.5's profile: seconds, Zulu. */
export function readTime(der: Uint8Array, tlv: Tlv | undefined): Date {
  if (tlv === undefined) throw new Error('missing time');
  const text = contents(der, tlv).toString('latin1');
  const utc = tlv.tag === TAG.UTC_TIME && /^(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)Z$/.exec(text);
  const gen = tlv.tag === TAG.GENERALIZED_TIME && /^(\d{4})(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)Z$/.exec(text);
  const m = utc || gen;
  if (!m) throw new Error(`malformed time ${JSON.stringify(text)}`);
  const yy = Number(m[1]);
  // UTCTime years: 50-99 are 19xx, 00-49 are 20xx (RFC 5280 §4.1.2.5.1).
  const year = utc ? (yy >= 50 ? 1900 + yy : 2000 + yy) : yy;
  return new Date(Date.UTC(year, Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6])));
}

// --- Writing -------------------------------------------------------------------------

export function tlv(tag: number, ...content: Uint8Array[]): Buffer {
  const body = Buffer.concat(content);
  const n = body.length;
  const len: number[] = [];
  if (n < 0x80) len.push(n);
  else {
    for (let x = n; x > 0; x = Math.floor(x / 256)) len.unshift(x & 0xff);
    len.unshift(0x80 | len.length);
  }
  return Buffer.concat([Buffer.from([tag, ...len]), body]);
}

export const sequence = (...parts: Uint8Array[]): Buffer => tlv(TAG.SEQUENCE, ...parts);

/** A SET OF with its elements in DER order (X.690 §11.6: sorted by encoding). */
export const setOf = (...parts: Buffer[]): Buffer => tlv(TAG.SET, ...[...parts].sort(Buffer.compare));

export function oid(text: string): Buffer {
  const [a, b, ...rest] = text.split('.').map(Number) as [number, number, ...number[]];
  const bytes = [...base128(a * 40 + b)];
  for (const v of rest) bytes.push(...base128(v));
  return tlv(TAG.OID, Buffer.from(bytes));
}

function base128(v: number): number[] {
  const out = [v & 0x7f];
  for (let x = Math.floor(v / 128); x > 0; x = Math.floor(x / 128)) out.unshift((x & 0x7f) | 0x80);
  return out;
}

/** An INTEGER from unsigned big-endian bytes: minimal, and kept positive (X.690 §8.3.2). */
export function unsignedInteger(bytes: Uint8Array): Buffer {
  let i = 0;
  while (i < bytes.length - 1 && bytes[i] === 0) i++;
  const trimmed = bytes.subarray(i);
  const pad = trimmed.length === 0 || (trimmed[0]! & 0x80) !== 0;
  return tlv(TAG.INTEGER, pad ? Buffer.concat([Buffer.from([0]), trimmed]) : trimmed);
}

export const smallInteger = (n: number): Buffer => unsignedInteger(Buffer.from([n]));

export const boolean = (value: boolean): Buffer => tlv(TAG.BOOLEAN, Buffer.from([value ? 0xff : 0]));

export const octetString = (bytes: Uint8Array): Buffer => tlv(TAG.OCTET_STRING, bytes);

/** A BIT STRING of whole octets (signatures, public keys). */
export const bitString = (bytes: Uint8Array): Buffer => tlv(TAG.BIT_STRING, Buffer.from([0]), bytes);

/**
 * A named-bit BIT STRING (X.690 §11.2.2: trailing zero bits dropped) from flags where
 * bit n of `flags` is the ASN.1 list's bit n, as in KeyUsage.
 */
export function namedBits(flags: number): Buffer {
  let top = -1;
  for (let n = 0; n < 31; n++) if (flags & (1 << n)) top = n;
  const octets = Buffer.alloc(Math.floor(top / 8) + 1);
  for (let n = 0; n <= top; n++) if (flags & (1 << n)) octets[n >> 3]! |= 0x80 >> (n & 7);
  const unused = top < 0 ? 0 : 7 - (top & 7);
  return tlv(TAG.BIT_STRING, Buffer.from([unused]), top < 0 ? Buffer.alloc(0) : octets);
}

/** The flags `namedBits` encodes, read back from a BIT STRING's bits (after the unused count). */
export function flagsOf(bits: Uint8Array): number {
  let flags = 0;
  for (let n = 0; n < Math.min(bits.length * 8, 31); n++)
    if (bits[n >> 3]! & (0x80 >> (n & 7))) flags |= 1 << n;
  return flags;
}

export const utf8String = (text: string): Buffer => tlv(TAG.UTF8_STRING, Buffer.from(text, 'utf8'));

/** UTCTime through 2049, GeneralizedTime from 2050 (RFC 5280 §4.1.2.5); whole seconds. */
export function time(date: Date): Buffer {
  const iso = date.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  const digits = `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}${iso.slice(11, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}Z`;
  const year = date.getUTCFullYear();
  if (year >= 1950 && year < 2050) return tlv(TAG.UTC_TIME, Buffer.from(digits.slice(2), 'latin1'));
  return tlv(TAG.GENERALIZED_TIME, Buffer.from(digits, 'latin1'));
}

// --- PEM (RFC 7468) ------------------------------------------------------------------

export function toPem(der: Uint8Array, label: string): string {
  const b64 = Buffer.from(der)
    .toString('base64')
    .replace(/(.{64})/g, '$1\n');
  return `-----BEGIN ${label}-----\n${b64}${b64.endsWith('\n') ? '' : '\n'}-----END ${label}-----\n`;
}

/** The first PEM block with one of `labels`, decoded; undefined when there is none. */
export function fromPem(pem: string, labels: readonly string[]): Buffer | undefined {
  for (const m of pem.matchAll(/-----BEGIN ([A-Z0-9 ]+)-----([\s\S]*?)-----END \1-----/g)) {
    if (labels.includes(m[1]!)) return Buffer.from(m[2]!.replace(/\s+/g, ''), 'base64');
  }
  return undefined;
}
