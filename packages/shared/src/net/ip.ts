import { isIPv4, isIPv6 } from 'node:net';

/**
 * Canonical IP text, so that an address is one map key however it was written:
 * IPv4 dotted quad; IPv6 lowercase, RFC 5952 compressed; an IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d) is returned as its IPv4 form, because a dual-stack socket reports
 * IPv4 peers that way and they are the same workload.
 */
export function canonicalIp(text: string): string | undefined {
  if (isIPv4(text)) return text.split('.').some((o) => o.length > 1 && o.startsWith('0')) ? undefined : text;
  if (!isIPv6(text) || text.includes('%')) return undefined;
  const bytes = ipv6Bytes(text);
  if (bytes === undefined) return undefined;
  const mapped = bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
  if (mapped) return `${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`;
  return formatIpv6(bytes);
}

export function ipFamily(canonical: string): 4 | 6 {
  return canonical.includes(':') ? 6 : 4;
}

/** Raw bytes of a canonical or textual IP: 4 bytes for IPv4, 16 for IPv6. */
export function ipToBytes(text: string): Uint8Array | undefined {
  if (isIPv4(text)) return Uint8Array.from(text.split('.').map(Number));
  if (isIPv6(text)) return ipv6Bytes(text);
  return undefined;
}

export function bytesToIp(bytes: Uint8Array): string | undefined {
  if (bytes.length === 4) return bytes.join('.');
  if (bytes.length === 16) return canonicalIp(formatIpv6(bytes));
  return undefined;
}

/** `host:port` with IPv6 in brackets, as in an HTTP authority. */
export function formatHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function ipv6Bytes(text: string): Uint8Array | undefined {
  let head = text;
  const tailBytes: number[] = [];
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    tailBytes.push(...v4[1]!.split('.').map(Number));
    head = `${text.slice(0, -v4[1]!.length)}0:0`;
  }
  const [left = '', right] = head.split('::');
  const leftGroups = left === '' ? [] : left.split(':');
  const rightGroups = right === undefined || right === '' ? [] : right.split(':');
  const missing = 8 - leftGroups.length - rightGroups.length;
  if (right === undefined ? missing !== 0 : missing < 1) return undefined;
  const groups = [
    ...leftGroups,
    ...new Array<string>(right === undefined ? 0 : missing).fill('0'),
    ...rightGroups,
  ];
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    const v = Number.parseInt(g, 16);
    out[i * 2] = v >> 8;
    out[i * 2 + 1] = v & 0xff;
  });
  if (tailBytes.length === 4) out.set(tailBytes, 12);
  return out;
}

function formatIpv6(bytes: Uint8Array): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((bytes[i]! << 8) | bytes[i + 1]!);
  // RFC 5952 §4.2: compress the longest run of two or more zero groups, the first on a tie.
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
