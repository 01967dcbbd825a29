import { getSystemErrorName } from 'node:util';
import { formatIpBytes, ipToBytes } from '@zmesh/shared';
import koffi from 'koffi';

/**
 * The few libc calls Node lacks, bound with koffi: namespace switching, raw sockets a
 * netns can own, SO_NETNS_COOKIE, and the bpf() commands the hot path needs. Every call
 * is synchronous and runs on the calling (main) thread; a failure throws a `SysError`
 * carrying the errno name (`ENOENT`, `EPERM`, …), like Node's own errno exceptions.
 */
export class SysError extends Error {
  readonly code: string;
  readonly errno: number;
  readonly syscall: string;

  constructor(syscall: string, errno: number, detail?: string) {
    const name = errnoName(errno);
    super(`${syscall}${detail === undefined ? '' : ` ${detail}`}: ${name}`);
    this.name = 'SysError';
    this.code = name;
    this.errno = errno;
    this.syscall = syscall;
  }
}

const AF_INET = 2;
const AF_INET6 = 10;
const SOCK_STREAM = 1;
export const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
export const CLONE_NEWNET = 0x40000000;
const AF_NETLINK = 16;
const SOCK_RAW = 3;
const MSG_DONTWAIT = 0x40;
const NLMSG_ERROR = 2;
const SOL_SOCKET = 1;
const SO_REUSEADDR = 2;
const SO_REUSEPORT = 15;
const SO_SNDBUF = 7;
const SO_NETNS_COOKIE = 71;
const SO_PEERCRED = 17;
const SO_MARK = 36;
const IP_TRANSPARENT = 19;
const IP_BIND_ADDRESS_NO_PORT = 24;
const IPV6_TRANSPARENT = 75;
const SOL_IP = 0;
const SOL_IPV6 = 41;
const IP_FREEBIND = 15;
const IPV6_V6ONLY = 26;
const IPV6_FREEBIND = 78;
const SYS_BPF = process.arch === 'arm64' ? 280 : 321;

const BPF_CMD = {
  mapLookupElem: 1,
  mapUpdateElem: 2,
  mapDeleteElem: 3,
  mapGetNextKey: 4,
  objPin: 6,
  objGet: 7,
  linkCreate: 28,
} as const;

const libc = koffi.load('libc.so.6');
const c = {
  setns: libc.func('int setns(int fd, int nstype)'),
  socket: libc.func('int socket(int domain, int type, int protocol)'),
  bind: libc.func('int bind(int fd, const void *addr, uint32_t len)'),
  listen: libc.func('int listen(int fd, int backlog)'),
  close: libc.func('int close(int fd)'),
  send: libc.func('long send(int fd, const void *buf, size_t len, int flags)'),
  recv: libc.func('long recv(int fd, _Out_ void *buf, size_t len, int flags)'),
  setsockopt: libc.func('int setsockopt(int fd, int level, int name, const void *val, uint32_t len)'),
  getsockopt: libc.func(
    'int getsockopt(int fd, int level, int name, _Out_ void *val, _Inout_ uint32_t *len)',
  ),
  getpeername: libc.func('int getpeername(int fd, _Out_ void *addr, _Inout_ uint32_t *len)'),
  // syscall(2) is variadic; the x86-64 and aarch64 Linux ABIs pass these integer and
  // pointer arguments identically for a fixed prototype, and a fixed one is cheaper.
  bpf: libc.func('long syscall(long nr, int cmd, void *attr, uint32_t size)'),
};

function errnoName(errno: number): string {
  try {
    return getSystemErrorName(-errno);
  } catch {
    return `errno ${errno}`;
  }
}

function check(syscall: string, rc: number | bigint, detail?: string): number {
  const n = Number(rc);
  if (n < 0) throw new SysError(syscall, koffi.errno(), detail);
  return n;
}

export function setns(fd: number, nstype: number): void {
  check('setns', c.setns(fd, nstype));
}

export function socket(family: 4 | 6, flags = 0): number {
  return check('socket', c.socket(family === 4 ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
}

/** An rtnetlink socket (NETLINK_ROUTE) of the calling thread's network namespace. */
export function netlinkRouteSocket(): number {
  return check('socket', c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0), 'AF_NETLINK');
}

/**
 * One rtnetlink request and its acknowledgement: 0 or the negative errno the kernel
 * answered. rtnetlink handles a request inside send(), so the answer is already queued
 * and the receive never waits (MSG_DONTWAIT: an empty queue is an error, not a hang).
 */
export function netlinkRequest(fd: number, msg: Buffer): number {
  check('send', c.send(fd, msg, msg.length, 0), 'netlink');
  const buf = Buffer.alloc(4096);
  const n = check('recv', c.recv(fd, buf, buf.length, MSG_DONTWAIT), 'netlink');
  if (n < 20 || buf.readUInt16LE(4) !== NLMSG_ERROR)
    throw new SysError('recv', 71, 'netlink: no acknowledgement');
  return buf.readInt32LE(16);
}

export function close(fd: number): void {
  check('close', c.close(fd));
}

export function listen(fd: number, backlog: number): void {
  check('listen', c.listen(fd, backlog));
}

function setsockoptInt(fd: number, level: number, name: number, value: number): void {
  const buf = Buffer.alloc(4);
  buf.writeInt32LE(value);
  check('setsockopt', c.setsockopt(fd, level, name, buf, 4));
}

export function setReuseAddr(fd: number): void {
  setsockoptInt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
}

/**
 * SO_REUSEPORT: another socket of the same user may bind the same address and port, and the
 * kernel spreads new connections over the group (an upgrade's overlap: two ztunnels).
 */
export function setReusePort(fd: number): void {
  setsockoptInt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
}

/** SO_SNDBUF (the kernel doubles it for its bookkeeping, and stops autotuning it). */
export function setSendBuffer(fd: number, bytes: number): void {
  setsockoptInt(fd, SOL_SOCKET, SO_SNDBUF, bytes);
}

/** The socket's SO_SNDBUF as the kernel keeps it (twice what was set). */
export function sendBuffer(fd: number): number {
  const val = Buffer.alloc(4);
  check('getsockopt', c.getsockopt(fd, SOL_SOCKET, SO_SNDBUF, val, [4]), 'SO_SNDBUF');
  return val.readInt32LE(0);
}

export function setFreebind(fd: number, family: 4 | 6): void {
  if (family === 4) setsockoptInt(fd, SOL_IP, IP_FREEBIND, 1);
  else setsockoptInt(fd, SOL_IPV6, IPV6_FREEBIND, 1);
}

/**
 * IP_TRANSPARENT / IPV6_TRANSPARENT: the socket may bind an address that is not local, so
 * a connection can leave from the original client's address (needs CAP_NET_ADMIN).
 */
export function setTransparent(fd: number, family: 4 | 6): void {
  if (family === 4) setsockoptInt(fd, SOL_IP, IP_TRANSPARENT, 1);
  else setsockoptInt(fd, SOL_IPV6, IPV6_TRANSPARENT, 1);
}

/**
 * IP_BIND_ADDRESS_NO_PORT (IPv4 and IPv6 sockets): a bind with port 0 leaves the port to
 * connect(), which picks one whose 4-tuple is free, as an unbound connect does. A port chosen
 * at bind time ignores the peer, and at hundreds of connections a second from one client
 * address it landed on tuples the app still held in TIME_WAIT (connects then stalled).
 */
export function setBindAddressNoPort(fd: number): void {
  setsockoptInt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1);
}

/** SO_MARK: the fwmark every packet of the socket carries (policy routing matches on it). */
export function setMark(fd: number, mark: number): void {
  setsockoptInt(fd, SOL_SOCKET, SO_MARK, mark);
}

/** The socket's SO_MARK (reading needs no privilege). */
export function mark(fd: number): number {
  const val = Buffer.alloc(4);
  check('getsockopt', c.getsockopt(fd, SOL_SOCKET, SO_MARK, val, [4]), 'SO_MARK');
  return val.readUInt32LE(0);
}

export function setV6Only(fd: number): void {
  setsockoptInt(fd, SOL_IPV6, IPV6_V6ONLY, 1);
}

export function bind(fd: number, host: string, port: number): void {
  const addr = encodeSockaddr(host, port);
  check('bind', c.bind(fd, addr, addr.length), `${host}:${port}`);
}

/** The cookie of the network namespace the socket belongs to (Linux 5.14+). */
export function netnsCookie(fd: number): bigint {
  const val = Buffer.alloc(8);
  const len = [8];
  check('getsockopt', c.getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, val, len), 'SO_NETNS_COOKIE');
  return val.readBigUInt64LE(0);
}

/** The credentials of the process at the other end of a Unix socket (SO_PEERCRED). */
export function peerCred(fd: number): { pid: number; uid: number; gid: number } {
  const val = Buffer.alloc(12);
  check('getsockopt', c.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, val, [12]), 'SO_PEERCRED');
  return { pid: val.readInt32LE(0), uid: val.readUInt32LE(4), gid: val.readUInt32LE(8) };
}

/** SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST: the same number at each level. */
const SO_ORIGINAL_DST = 80;

/** Where a connection was going before a netfilter REDIRECT sent it to this socket. */
export function originalDestination(fd: number, family: 4 | 6): SockAddr {
  const buf = Buffer.alloc(28);
  const level = family === 4 ? SOL_IP : SOL_IPV6;
  check('getsockopt', c.getsockopt(fd, level, SO_ORIGINAL_DST, buf, [buf.length]), 'SO_ORIGINAL_DST');
  return decodeSockaddr(buf);
}

export interface SockAddr {
  host: string;
  port: number;
  family: 4 | 6;
}

export function getpeername(fd: number): SockAddr {
  const buf = Buffer.alloc(28);
  check('getpeername', c.getpeername(fd, buf, [buf.length]));
  return decodeSockaddr(buf);
}

export function familyOf(host: string): 4 | 6 {
  return addressBytes(host).length === 4 ? 4 : 6;
}

export function encodeSockaddr(host: string, port: number): Buffer {
  if (familyOf(host) === 4) {
    const buf = Buffer.alloc(16);
    buf.writeUInt16LE(AF_INET, 0);
    buf.writeUInt16BE(port, 2);
    ipv4Bytes(host).copy(buf, 4);
    return buf;
  }
  const buf = Buffer.alloc(28);
  buf.writeUInt16LE(AF_INET6, 0);
  buf.writeUInt16BE(port, 2);
  ipv6Bytes(host).copy(buf, 8);
  return buf;
}

function decodeSockaddr(buf: Buffer): SockAddr {
  const family = buf.readUInt16LE(0);
  const port = buf.readUInt16BE(2);
  if (family === AF_INET) return { host: formatIPv4(buf.subarray(4, 8)), port, family: 4 };
  if (family === AF_INET6) return { host: formatIPv6(buf.subarray(8, 24)), port, family: 6 };
  throw new SysError('getpeername', 97, `family ${family}`);
}

/** The address's bytes as written (an IPv4-mapped IPv6 address stays 16 bytes); EINVAL if it is not one. */
function addressBytes(host: string): Uint8Array {
  const bytes = ipToBytes(host);
  if (bytes === undefined) throw new SysError('inet_pton', 22, host);
  return bytes;
}

export function ipv4Bytes(host: string): Buffer {
  const bytes = addressBytes(host);
  if (bytes.length !== 4) throw new SysError('inet_pton', 22, host);
  return Buffer.from(bytes);
}

export function ipv6Bytes(host: string): Buffer {
  const bytes = addressBytes(host);
  if (bytes.length !== 16) throw new SysError('inet_pton', 22, host);
  return Buffer.from(bytes);
}

export function formatIPv4(b: Uint8Array): string {
  return formatIpBytes(b.subarray(0, 4))!;
}

/** RFC 5952 text form; IPv4-mapped addresses print as `::ffff:a.b.c.d`. */
export function formatIPv6(b: Uint8Array): string {
  return formatIpBytes(b.subarray(0, 16))!;
}

/*
 * bpf(2). bpf_attr holds raw pointers to key, value and path, so those live in one
 * stable native scratch area (koffi.alloc) rather than in movable JS buffers. The
 * process is single-threaded where it calls these, so one scratch area is enough.
 */
const SCRATCH_KEY = 0;
const SCRATCH_VALUE = 256;
const SCRATCH_PATH = 512;
const SCRATCH_SIZE = 512 + 4096;
const MAX_KV = 256;
const scratchPtr = koffi.alloc('uint8_t', SCRATCH_SIZE);
const scratch = Buffer.from(koffi.view(scratchPtr, SCRATCH_SIZE));
const scratchAddr = koffi.address(scratchPtr);
const attr = Buffer.alloc(32);

function bpf(cmd: number, size: number, what: string): number {
  return check('bpf', c.bpf(SYS_BPF, cmd, attr, size), what);
}

function putPath(path: string): void {
  const n = scratch.write(path, SCRATCH_PATH, 'utf8');
  if (n >= 4095) throw new SysError('bpf', 36, path);
  scratch[SCRATCH_PATH + n] = 0;
  attr.fill(0);
  attr.writeBigUInt64LE(scratchAddr + BigInt(SCRATCH_PATH), 0);
}

/** Opens a pinned BPF object (map, program or link); the caller closes the fd. */
export function bpfObjGet(path: string): number {
  putPath(path);
  return bpf(BPF_CMD.objGet, 16, `OBJ_GET ${path}`);
}

export function bpfObjPin(fd: number, path: string): void {
  putPath(path);
  attr.writeUInt32LE(fd, 8);
  bpf(BPF_CMD.objPin, 16, `OBJ_PIN ${path}`);
}

/** A BPF link attaching a program to a target (a cgroup fd for cgroup hooks). */
export function bpfLinkCreate(progFd: number, targetFd: number, attachType: number): number {
  attr.fill(0);
  attr.writeUInt32LE(progFd, 0);
  attr.writeUInt32LE(targetFd, 4);
  attr.writeUInt32LE(attachType, 8);
  return bpf(BPF_CMD.linkCreate, 16, `LINK_CREATE type ${attachType}`);
}

function elemAttr(mapFd: number, key: Uint8Array | undefined, second: number): void {
  if (key !== undefined && key.length > MAX_KV) throw new SysError('bpf', 7, 'key too long');
  attr.fill(0);
  attr.writeUInt32LE(mapFd, 0);
  if (key !== undefined) {
    scratch.set(key, SCRATCH_KEY);
    attr.writeBigUInt64LE(scratchAddr + BigInt(SCRATCH_KEY), 8);
  }
  attr.writeBigUInt64LE(scratchAddr + BigInt(second), 16);
}

/** The value under `key`, or undefined when there is none (ENOENT). */
export function bpfMapLookup(mapFd: number, key: Uint8Array, valueSize: number): Buffer | undefined {
  elemAttr(mapFd, key, SCRATCH_VALUE);
  if (Number(c.bpf(SYS_BPF, BPF_CMD.mapLookupElem, attr, 32)) < 0) {
    const errno = koffi.errno();
    if (errno === 2) return undefined;
    throw new SysError('bpf', errno, 'MAP_LOOKUP_ELEM');
  }
  return Buffer.from(scratch.subarray(SCRATCH_VALUE, SCRATCH_VALUE + valueSize));
}

export function bpfMapUpdate(mapFd: number, key: Uint8Array, value: Uint8Array): void {
  if (value.length > MAX_KV) throw new SysError('bpf', 7, 'value too long');
  elemAttr(mapFd, key, SCRATCH_VALUE);
  scratch.set(value, SCRATCH_VALUE);
  bpf(BPF_CMD.mapUpdateElem, 32, 'MAP_UPDATE_ELEM');
}

/** Deletes `key`; false when it was not there. */
export function bpfMapDelete(mapFd: number, key: Uint8Array): boolean {
  elemAttr(mapFd, key, SCRATCH_VALUE);
  attr.writeBigUInt64LE(0n, 16);
  if (Number(c.bpf(SYS_BPF, BPF_CMD.mapDeleteElem, attr, 32)) < 0) {
    const errno = koffi.errno();
    if (errno === 2) return false;
    throw new SysError('bpf', errno, 'MAP_DELETE_ELEM');
  }
  return true;
}
