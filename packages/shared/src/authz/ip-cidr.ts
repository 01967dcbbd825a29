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
  /** Canonical text, for config dumps and error messages. */
  readonly text: string;
}

/** Parses IPv4 dotted-quad or IPv6 text (a `%zone` suffix is ignored); undefined if malformed. */
export function parseIp(text: string): ParsedIp | undefined {
  if (text.includes(':')) {
    const zone = text.indexOf('%');
    const words = parseIpv6(zone === -1 ? text : text.slice(0, zone));
    if (words === undefined) return undefined;
    if (words[0] === 0 && words[1] === 0 && words[2] === 0xffff) return { v4: true, w: [words[3]!] };
    return { v4: false, w: words };
  }
  const w = parseIpv4(text);
  return w === undefined ? undefined : { v4: true, w: [w] };
}

function parseIpv4(text: string): number | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  let out = 0;
  for (const part of parts) {
    // No leading zeros: "010" is octal to some parsers and decimal to others.
    if (!/^(0|[1-9]\d{0,2})$/.test(part)) return undefined;
    const n = Number(part);
    if (n > 255) return undefined;
    out = out * 256 + n;
  }
  return out;
}

function parseIpv6(text: string): number[] | undefined {
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const tail = halves.length === 2 ? (halves[1] === '' ? [] : halves[1]!.split(':')) : [];
  const groups: number[] = [];
  const all = [...head, ...(halves.length === 2 ? ['::'] : []), ...tail];
  for (let i = 0; i < all.length; i++) {
    const g = all[i]!;
    if (g === '::') {
      groups.push(-1);
    } else if (i === all.length - 1 && g.includes('.')) {
      const v4 = parseIpv4(g);
      if (v4 === undefined) return undefined;
      groups.push(v4 >>> 16, v4 & 0xffff);
    } else if (/^[0-9a-fA-F]{1,4}$/.test(g)) {
      groups.push(Number.parseInt(g, 16));
    } else {
      return undefined;
    }
  }
  const gap = groups.indexOf(-1);
  const explicit = groups.length - (gap === -1 ? 0 : 1);
  if (gap === -1 ? explicit !== 8 : explicit > 7) return undefined;
  const full =
    gap === -1 ? groups : [...groups.slice(0, gap), ...Array(8 - explicit).fill(0), ...groups.slice(gap + 1)];
  const words: number[] = [];
  for (let i = 0; i < 8; i += 2) words.push((full[i]! * 0x10000 + full[i + 1]!) >>> 0);
  return words;
}

/**
 * Builds a CIDR from address text and prefix length; host bits are allowed and cleared,
 * as ztunnel's `IpNet` does. An IPv4-mapped block of length ≥ 96 becomes the IPv4 block.
 */
export function makeCidr(address: string, length: number): Cidr | string {
  if (!Number.isInteger(length) || length < 0) return `prefix length ${length} is not a non-negative integer`;
  let ip = parseIp(address);
  if (ip === undefined) return `address ${JSON.stringify(address)} is not an IP address`;
  let bits = length;
  if (ip.v4 && address.includes(':')) {
    if (length < 96) ip = { v4: false, w: [0, 0, 0xffff, ip.w[0]!] };
    else bits = length - 96;
  }
  const max = ip.v4 ? 32 : 128;
  if (bits > max) return `prefix length ${length} exceeds ${ip.v4 ? 32 : 128} for ${address}`;
  const mask = ip.w.map((_, i) => maskWord(bits - 32 * i));
  const net = ip.w.map((w, i) => (w & mask[i]!) >>> 0);
  return { v4: ip.v4, net, mask, text: `${formatIp({ v4: ip.v4, w: net })}/${bits}` };
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
