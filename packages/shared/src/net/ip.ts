/**
 * The one IP module: parsing, canonical text, bytes and CIDR blocks, for every caller
 * (workload addresses, policy matching, xDS codecs). One set of rules:
 *
 * - IPv4 is a dotted quad of decimal octets; a leading zero is refused (`010.1.2.3` is
 *   octal to some parsers, decimal to others).
 * - IPv6 is any RFC 4291 §2.2 form, hex in either case, with an embedded dotted quad.
 * - A `%zone` suffix is meaningful only on a link-local IPv6 address (fe80::/10, RFC 4007
 *   §6): there it is accepted and dropped (one workload, one key, whatever interface it
 *   was reached on; a prefix has no zone). On any other address it is refused.
 * - An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2) is the IPv4 address
 *   for matching and canonical text: a dual-stack socket reports IPv4 peers that way, and
 *   policy written for `10.0.0.0/8` must still apply to them. `ipToBytes` alone keeps the
 *   family as written (a wire field says which it carries).
 * - Canonical text: the dotted quad, or lowercase RFC 5952 IPv6 (longest run of two or
 *   more zero groups compressed, the first on a tie). Where an IPv4-mapped address stays
 *   IPv6 (bytes as written: a socket address, a BPF key), it prints as `::ffff:a.b.c.d`
 *   (RFC 5952 §5).
 */

export interface ParsedIp {
  readonly v4: boolean;
  /** IPv4: one word in w[0]; IPv6: four words, most significant first. Unsigned. */
  readonly w: readonly number[];
}

export interface Cidr {
  readonly v4: boolean;
  /** Network words with host bits cleared. */
  readonly net: readonly number[];
  readonly mask: readonly number[];
  readonly bits: number;
}

/**
 * Parses an address (rules above), folding IPv4-mapped IPv6 to IPv4; undefined if malformed.
 * Hand-rolled over char codes: it runs twice per connection decision, and split/regex
 * parsing cost more than the whole policy evaluation.
 */
export function parseIp(text: string): ParsedIp | undefined {
  const ip = parseAsWritten(text);
  if (ip === undefined || ip.v4) return ip;
  const w = ip.w;
  if (w[0] === 0 && w[1] === 0 && w[2] === 0xffff) return { v4: true, w: [w[3]!] };
  return ip;
}

/** Canonical text of an address (rules above), so that it is one map key however it was written. */
export function canonicalIp(text: string): string | undefined {
  const ip = parseIp(text);
  return ip === undefined ? undefined : formatIp(ip);
}

export function ipFamily(canonical: string): 4 | 6 {
  return canonical.includes(':') ? 6 : 4;
}

/** Raw bytes of an address in the family it is written in: 4 bytes for IPv4, 16 for IPv6 (mapped included). */
export function ipToBytes(text: string): Uint8Array | undefined {
  const ip = parseAsWritten(text);
  if (ip === undefined) return undefined;
  const out = new Uint8Array(ip.v4 ? 4 : 16);
  ip.w.forEach((w, i) => {
    out[i * 4] = w >>> 24;
    out[i * 4 + 1] = (w >>> 16) & 255;
    out[i * 4 + 2] = (w >>> 8) & 255;
    out[i * 4 + 3] = w & 255;
  });
  return out;
}

/** Canonical text of 4 or 16 address bytes (an IPv4-mapped one becomes IPv4); undefined for other lengths. */
export function bytesToIp(bytes: Uint8Array): string | undefined {
  const ip = fromBytes(bytes);
  if (ip === undefined || ip.v4) return ip && formatIp(ip);
  const w = ip.w;
  if (w[0] === 0 && w[1] === 0 && w[2] === 0xffff) return formatIp({ v4: true, w: [w[3]!] });
  return formatIp(ip);
}

/**
 * Text of 4 or 16 address bytes in the family they are in, for where the family is part of
 * the value (a socket address, a BPF key): an IPv4-mapped one stays `::ffff:a.b.c.d`.
 */
export function formatIpBytes(bytes: Uint8Array): string | undefined {
  const ip = fromBytes(bytes);
  return ip && formatIp(ip);
}

function fromBytes(bytes: Uint8Array): ParsedIp | undefined {
  if (bytes.length !== 4 && bytes.length !== 16) return undefined;
  const w: number[] = [];
  for (let i = 0; i < bytes.length; i += 4)
    w.push(((bytes[i]! << 24) | (bytes[i + 1]! << 16) | (bytes[i + 2]! << 8) | bytes[i + 3]!) >>> 0);
  return { v4: w.length === 1, w };
}

/** `host:port` with IPv6 in brackets, as in an HTTP authority. */
export function formatHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Canonical text of a parsed address (rules above). */
export function formatIp(ip: ParsedIp): string {
  if (ip.v4) {
    const w = ip.w[0]!;
    return `${w >>> 24}.${(w >>> 16) & 255}.${(w >>> 8) & 255}.${w & 255}`;
  }
  const w = ip.w;
  if (w[0] === 0 && w[1] === 0 && w[2] === 0xffff) return `::ffff:${formatIp({ v4: true, w: [w[3]!] })}`;
  const groups: number[] = [];
  for (const word of w) groups.push(word >>> 16, word & 0xffff);
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/**
 * Builds a CIDR from address text and prefix length; host bits are allowed and cleared,
 * as ztunnel's `IpNet` does. An IPv4-mapped block of length ≥ 96 becomes the IPv4 block.
 */
export function makeCidr(address: string, length: number): Cidr | string {
  if (!Number.isInteger(length) || length < 0) return `prefix length ${length} is not a non-negative integer`;
  const ip = parseIp(address);
  if (ip === undefined) return `address ${JSON.stringify(address)} is not an IP address`;
  let v4 = ip.v4;
  let w = ip.w;
  let bits = length;
  if (v4 && address.includes(':')) {
    if (length < 96) [v4, w] = [false, [0, 0, 0xffff, w[0]!]];
    else bits = length - 96;
  }
  if (bits > (v4 ? 32 : 128)) return `prefix length ${length} exceeds ${v4 ? 32 : 128} for ${address}`;
  const mask: number[] = [];
  const net: number[] = [];
  for (let i = 0; i < w.length; i++) {
    mask.push(maskWord(bits - 32 * i));
    net.push((w[i]! & mask[i]!) >>> 0);
  }
  return { v4, net, mask, bits };
}

/** Canonical `address/bits` text, for config dumps and converted policies. */
export function cidrText(c: Cidr): string {
  return `${formatIp({ v4: c.v4, w: c.net })}/${c.bits}`;
}

/** Parses `a.b.c.d/n`, `v6::/n`, or a bare address (a full-length prefix). */
export function parseCidr(text: string): Cidr | string {
  const slash = text.indexOf('/');
  if (slash === -1) return makeCidr(text, text.includes(':') ? 128 : 32);
  const len = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(len)) return `${JSON.stringify(text)} has a malformed prefix length`;
  return makeCidr(text.slice(0, slash), Number(len));
}

export function cidrContains(c: Cidr, ip: ParsedIp): boolean {
  if (c.v4 !== ip.v4) return false;
  const { net, mask } = c;
  const w = ip.w;
  for (let i = 0; i < net.length; i++) {
    if ((w[i]! & mask[i]!) >>> 0 !== net[i]) return false;
  }
  return true;
}

function maskWord(bits: number): number {
  if (bits <= 0) return 0;
  if (bits >= 32) return 0xffffffff;
  return (0xffffffff << (32 - bits)) >>> 0;
}

/** The address in the family it is written in (no IPv4-mapped folding); the zone rule applied. */
function parseAsWritten(text: string): ParsedIp | undefined {
  if (text.indexOf(':') === -1) {
    const w = parseIpv4(text, 0, text.length);
    return w < 0 ? undefined : { v4: true, w: [w] };
  }
  const zone = text.indexOf('%');
  const words = parseIpv6(text, zone === -1 ? text.length : zone);
  if (words === undefined) return undefined;
  if (zone !== -1 && !(isLinkLocal(words) && validZone(text, zone + 1))) return undefined;
  return { v4: false, w: words };
}

/** fe80::/10 (RFC 4291 §2.5.6): the only addresses whose zone means something here. */
function isLinkLocal(words: readonly number[]): boolean {
  return words[0]! >>> 22 === 0x3fa;
}

/** A zone id is an interface name or index: not empty, no whitespace, `%` or `/`. */
function validZone(text: string, from: number): boolean {
  if (from >= text.length) return false;
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c <= 32 || c === 37 || c === 47 || c === 127) return false;
  }
  return true;
}

/** Dotted quad in text[from, to) as an unsigned word, or -1. Leading zeros are refused (octal ambiguity). */
function parseIpv4(text: string, from: number, to: number): number {
  let out = 0;
  let octets = 0;
  let i = from;
  while (octets < 4) {
    const begin = i;
    let n = 0;
    while (i < to) {
      const c = text.charCodeAt(i);
      if (c < 48 || c > 57) break;
      n = n * 10 + (c - 48);
      i++;
    }
    const len = i - begin;
    if (len === 0 || len > 3 || n > 255 || (len > 1 && text.charCodeAt(begin) === 48)) return -1;
    out = out * 256 + n;
    octets++;
    if (octets < 4) {
      if (i >= to || text.charCodeAt(i) !== 46) return -1;
      i++;
    }
  }
  return i === to ? out : -1;
}

/** IPv6 text in text[0, to) as four unsigned words (RFC 4291 §2.2 forms), or undefined. */
function parseIpv6(text: string, to: number): number[] | undefined {
  const g: number[] = [];
  let gap = -1;
  let i = 0;
  if (text.startsWith('::')) {
    gap = 0;
    i = 2;
  }
  while (i < to) {
    let n = 0;
    let j = i;
    while (j < to && j - i < 5) {
      const d = hexValue(text.charCodeAt(j));
      if (d < 0) break;
      n = n * 16 + d;
      j++;
    }
    if (j < to && text.charCodeAt(j) === 46) {
      // Embedded IPv4 in the last 32 bits (RFC 4291 §2.2 form 3).
      const v4 = parseIpv4(text, i, to);
      if (v4 < 0 || g.length > 6) return undefined;
      g.push(v4 >>> 16, v4 & 0xffff);
      i = to;
      break;
    }
    if (j === i || j - i > 4) return undefined;
    g.push(n);
    i = j;
    if (i === to) break;
    if (text.charCodeAt(i) !== 58) return undefined;
    i++;
    if (i < to && text.charCodeAt(i) === 58) {
      if (gap !== -1) return undefined;
      gap = g.length;
      i++;
    } else if (i === to) {
      return undefined;
    }
  }
  if (gap === -1 ? g.length !== 8 : g.length > 7) return undefined;
  const zeros = 8 - g.length;
  const at = (k: number) => (gap === -1 || k < gap ? g[k]! : k < gap + zeros ? 0 : g[k - zeros]!);
  return [
    (at(0) * 0x10000 + at(1)) >>> 0,
    (at(2) * 0x10000 + at(3)) >>> 0,
    (at(4) * 0x10000 + at(5)) >>> 0,
    (at(6) * 0x10000 + at(7)) >>> 0,
  ];
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}
