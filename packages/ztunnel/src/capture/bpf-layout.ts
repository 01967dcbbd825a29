import { join } from 'node:path';
import { formatIPv4, formatIPv6 } from './sys.js';

/**
 * What bpf/capture.bpf.c defines, seen from user space: program and map names, the
 * cgroup hooks they attach to, and the byte layout of the keys and values ztunnel reads.
 * bpf/README.md is the reference; keep both in step.
 */

export const PIN_ROOT = '/sys/fs/bpf/zmesh';
export const OUTBOUND_PORT = 15001;
export const HBONE_PORT = 15008;

/** enum bpf_attach_type (include/uapi/linux/bpf.h). */
const ATTACH = {
  inetIngress: 0,
  inetSockCreate: 2,
  sockOps: 3,
  inet4Connect: 10,
  inet6Connect: 11,
  inet4Getpeername: 29,
  inet6Getpeername: 30,
} as const;

export interface Hook {
  readonly prog: string;
  readonly attachType: number;
  /**
   * Added after the first release: a pin directory adopted from an older build may lack it
   * (the pod keeps the rest until it is enrolled again), as it may lack the throttle map.
   */
  readonly since?: 'socket-refusal';
}

/**
 * Attach order. Re-keying and getpeername go first so that no connect is redirected
 * before ztunnel can learn where it was going; strict inbound goes last (capture first).
 * Detach runs this list backwards: strict inbound leaves before capture, so a pod never
 * has its outbound sent direct while replies from outside are still being dropped.
 */
export const HOOKS: readonly Hook[] = [
  { prog: 'zm_sockops', attachType: ATTACH.sockOps },
  { prog: 'zm_getpeername4', attachType: ATTACH.inet4Getpeername },
  { prog: 'zm_getpeername6', attachType: ATTACH.inet6Getpeername },
  { prog: 'zm_connect4', attachType: ATTACH.inet4Connect },
  { prog: 'zm_connect6', attachType: ATTACH.inet6Connect },
  { prog: 'zm_sock_create', attachType: ATTACH.inetSockCreate, since: 'socket-refusal' },
  { prog: 'zm_ingress', attachType: ATTACH.inetIngress },
];

export const MAPS = {
  origDst: 'zm_orig_dst',
  exempt: 'zm_exempt',
  counters: 'zm_counters',
  throttle: 'zm_throttle',
} as const;

/** Indexes into zm_counters. */
export const COUNTER = { inboundDrops: 0, captured: 1, rekeyFailures: 2, throttled: 3 } as const;

/** A pod id becomes a directory name under PIN_ROOT: keep it to a safe alphabet. */
export const POD_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export function podDir(root: string, podId: string): string {
  return join(root, podId);
}

export const pinPaths = (dir: string) => ({
  progDir: join(dir, 'prog'),
  mapDir: join(dir, 'map'),
  linkDir: join(dir, 'link'),
  prog: (name: string) => join(dir, 'prog', name),
  map: (name: string) => join(dir, 'map', name),
  link: (name: string) => join(dir, 'link', name),
});

/** struct zm_key: u64 netns_cookie, u16 port (host order), u8 family, u8 pad[5]. */
export function encodeKey(netnsCookie: bigint, port: number, family: 4 | 6): Buffer {
  const key = Buffer.alloc(16);
  key.writeBigUInt64LE(netnsCookie, 0);
  key.writeUInt16LE(port, 8);
  key.writeUInt8(family, 10);
  return key;
}

export const VALUE_SIZE = 20;

export interface OriginalDestination {
  host: string;
  port: number;
  /** Family on the wire: an IPv4-mapped destination is 4. */
  family: 4 | 6;
}

/** struct zm_dst: u32 addr[4] (network order), u16 port (host order), u8 family, u8 mapped. */
export function decodeValue(value: Buffer): OriginalDestination | undefined {
  const family = value.readUInt8(18);
  const port = value.readUInt16LE(16);
  if (family === 4) return { host: formatIPv4(value.subarray(0, 4)), port, family: 4 };
  if (family === 6) return { host: formatIPv6(value.subarray(0, 16)), port, family: 6 };
  return undefined;
}

/** zm_exempt key: 16 address bytes, IPv4 as ::ffff:a.b.c.d (RFC 4291 2.5.5.2). */
export function exemptKey(addr: Buffer): Buffer {
  if (addr.length === 16) return addr;
  const key = Buffer.alloc(16);
  key.writeUInt16BE(0xffff, 10);
  addr.copy(key, 12);
  return key;
}

/** One token in the throttle's units (struct zm_throttle counts billionths). */
const THROTTLE_TOKEN = 1_000_000_000n;

/**
 * struct zm_throttle (zm_throttle[0]): u64 until_ns, rate (per second), burst_nt,
 * tokens_nt, last_ns. Times are CLOCK_MONOTONIC nanoseconds as bpf_ktime_get_ns() reads
 * them (process.hrtime.bigint() is the same clock); the bucket starts with `tokens` (empty
 * by default, as after a refusal).
 */
export function encodeThrottle(
  untilNs: bigint,
  rate: number,
  burst: number,
  nowNs: bigint,
  tokens = 0,
): Buffer {
  const size = Math.max(1, Math.round(burst));
  const held = Math.min(Math.max(0, tokens), size);
  const value = Buffer.alloc(40);
  value.writeBigUInt64LE(untilNs, 0);
  value.writeBigUInt64LE(BigInt(Math.max(1, Math.round(rate))), 8);
  value.writeBigUInt64LE(BigInt(size) * THROTTLE_TOKEN, 16);
  value.writeBigUInt64LE(BigInt(Math.floor(held * Number(THROTTLE_TOKEN))), 24);
  value.writeBigUInt64LE(nowNs, 32);
  return value;
}
