import { isIPv4, isIPv6, SocketAddress } from 'node:net';

/**
 * IP addresses are raw bytes on the wire (4 or 16) and canonical text in the model: IPv4
 * dotted quad, IPv6 lowercase compressed per RFC 5952 (node's inet_ntop gives exactly that).
 */
export function bytesToIp(bytes: Uint8Array): string | undefined {
  if (bytes.length === 4) return bytes.join('.');
  if (bytes.length !== 16) return undefined;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return new SocketAddress({ address: groups.join(':'), family: 'ipv6' }).address;
}

export function ipToBytes(ip: string): Uint8Array | undefined {
  if (isIPv4(ip)) return Uint8Array.from(ip.split('.').map(Number));
  if (!isIPv6(ip)) return undefined;
  return ipv6ToBytes(ip);
}

export function canonicalIp(ip: string): string | undefined {
  const bytes = ipToBytes(ip);
  return bytes === undefined ? undefined : bytesToIp(bytes);
}

function ipv6ToBytes(ip: string): Uint8Array {
  let text = ip.toLowerCase();
  const out = new Uint8Array(16);
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  // An embedded IPv4 tail (RFC 4291 §2.2 form 3) is two 16-bit groups.
  if (isIPv4(tail)) {
    const [a, b, c, d] = tail.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = rest === undefined || rest === '' ? [] : rest.split(':');
  const zeros = 8 - headGroups.length - tailGroups.length;
  const groups = [
    ...headGroups,
    ...new Array<string>(rest === undefined ? 0 : zeros).fill('0'),
    ...tailGroups,
  ];
  groups.forEach((g, i) => {
    const v = Number.parseInt(g, 16);
    out[i * 2] = v >> 8;
    out[i * 2 + 1] = v & 0xff;
  });
  return out;
}
