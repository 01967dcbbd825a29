/**
 * IP addresses and CIDR blocks for L4 policy matching, parsed once into 32-bit words so
 * that a match is four masked compares. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`,
 * RFC 4291 §2.5.5.2) are folded to IPv4: a dual-stack socket reports an IPv4 peer that
 * way, and policy written for `10.0.0.0/8` must still apply to it.
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
 * Parses IPv4 dotted-quad or IPv6 text (a `%zone` suffix is ignored); undefined if malformed.
 * Hand-rolled over char codes: it runs twice per connection decision, and split/regex
 * parsing cost more than the whole policy evaluation.
 */
export function parseIp(text: string): ParsedIp | undefined {
  if (text.indexOf(':') === -1) {
    const w = parseIpv4(text, 0, text.length);
    return w < 0 ? undefined : { v4: true, w: [w] };
  }
  const zone = text.indexOf('%');
  const words = parseIpv6(text, zone === -1 ? text.length : zone);
  if (words === undefined) return undefined;
  if (words[0] === 0 && words[1] === 0 && words[2] === 0xffff) return { v4: true, w: [words[3]!] };
  return { v4: false, w: words };
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
      if (v4 < 0) return undefined;
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

function maskWord(bits: number): number {
  if (bits <= 0) return 0;
  if (bits >= 32) return 0xffffffff;
  return (0xffffffff << (32 - bits)) >>> 0;
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

export function formatIp(ip: ParsedIp): string {
  if (ip.v4) {
    const w = ip.w[0]!;
    return `${w >>> 24}.${(w >>> 16) & 255}.${(w >>> 8) & 255}.${w & 255}`;
  }
  const groups: string[] = [];
  for (const w of ip.w) groups.push((w >>> 16).toString(16), (w & 0xffff).toString(16));
  return groups.join(':');
}
