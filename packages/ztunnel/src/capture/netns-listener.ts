import { closeSync, openSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { logger } from '@zmesh/shared';
import * as sys from './sys.js';

const log = logger('capture');

/** Default accept backlog for in-pod listeners (per listener, bounded by somaxconn). */
const DEFAULT_BACKLOG = 511;

/**
 * The namespace this thread started in, held open for the life of the process so that
 * switching back never depends on a path lookup. Opened on first use, from the main
 * thread, before any setns.
 */
let homeNetnsFd: number | undefined;

function homeNetns(): number {
  homeNetnsFd ??= openSync('/proc/thread-self/ns/net', 'r');
  return homeNetnsFd;
}

/**
 * An enrolled pod's network namespace, opened once at enrollment and closed when the pod
 * is removed: a socket per connection in the pod no longer opens and closes the namespace
 * file (3% of ztunnel's CPU in a connection burst). After `close()` every use throws, so a
 * late connect for a removed pod fails instead of reaching a reused descriptor number.
 */
export class NetnsHandle {
  #fd: number | undefined;

  constructor(readonly path: string) {
    this.#fd = openSync(path, 'r');
  }

  get fd(): number {
    if (this.#fd === undefined) throw new Error(`network namespace ${this.path} is closed (pod removed)`);
    return this.#fd;
  }

  close(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
  }
}

/** A namespace by path (opened for this one use) or by an open handle. */
export type Netns = string | NetnsHandle;

/**
 * Runs `fn` on this thread inside the network namespace `netns`, then switches
 * back. setns(2) changes only the calling thread, so libuv's threadpool and every other
 * thread stay home; `fn` must be synchronous so no other JS runs while the main thread
 * is away. Only socket(2) needs to run inside: a socket keeps the namespace it was
 * created in, and bind/listen/connect act on that namespace from any thread.
 */
export function inNetns<T>(netns: Netns, fn: () => T): T {
  const home = homeNetns();
  const target = typeof netns === 'string' ? openSync(netns, 'r') : netns.fd;
  try {
    sys.setns(target, sys.CLONE_NEWNET);
    try {
      return fn();
    } finally {
      restoreHome(home);
    }
  } finally {
    if (typeof netns === 'string') closeSync(target);
  }
}

function restoreHome(home: number): void {
  try {
    sys.setns(home, sys.CLONE_NEWNET);
  } catch (e) {
    // A main thread stuck in a pod's namespace would open every later socket there,
    // silently. Nothing sane can continue from that, so stop (fail closed).
    log.fatal({ err: e }, 'cannot return to the home network namespace');
    process.abort();
  }
}

/** A new non-blocking TCP socket owned by the network namespace `netns`. */
export function socketInNetns(netns: Netns, family: 4 | 6): number {
  return inNetns(netns, () => sys.socket(family, sys.SOCK_NONBLOCK));
}

export interface ListenOptions {
  backlog?: number;
  /** Bind before the address exists (IP_FREEBIND / IPV6_FREEBIND). */
  freebind?: boolean;
  /** SO_SNDBUF of every accepted socket (they inherit the listener's); kernel autotuning when absent. */
  sendBufferBytes?: number;
}

/**
 * A listening TCP socket inside the namespace `netns`, bound to `host:port`,
 * for `server.listen({ fd })`. The caller owns the fd (the server closes it on close).
 */
export function listenInNetns(netns: Netns, host: string, port: number, opts: ListenOptions = {}): number {
  const family = sys.familyOf(host);
  const fd = socketInNetns(netns, family);
  try {
    sys.setReuseAddr(fd);
    // A successor ztunnel binds the same pod ports while this one drains (docs/upgrade.md).
    sys.setReusePort(fd);
    if (family === 6) sys.setV6Only(fd);
    if (opts.freebind === true) sys.setFreebind(fd, family);
    if (opts.sendBufferBytes !== undefined) sys.setSendBuffer(fd, opts.sendBufferBytes);
    sys.bind(fd, host, port);
    sys.listen(fd, opts.backlog ?? DEFAULT_BACKLOG);
    return fd;
  } catch (e) {
    sys.close(fd);
    throw e;
  }
}

export interface ConnectOptions {
  sendBufferBytes?: number;
  /**
   * Connect from `host` (not a local address) with IP_TRANSPARENT and SO_MARK `mark`; a
   * refusal (EPERM without CAP_NET_ADMIN, a family that does not match) throws before any
   * connect, so the caller can fall back.
   */
  transparentSource?: { host: string; mark: number };
}

/**
 * A TCP connection from inside the namespace `netns` to `host:port`, e.g. ztunnel
 * to the application over the pod's loopback. The socket is created in the namespace
 * and handed to Node, which connects it (checked on Node 20: `new Socket({ fd })` takes
 * an unconnected non-blocking fd and `connect()` reuses its handle). Errors, including
 * ECONNREFUSED, arrive as the socket's 'error' event.
 */
export function connectInNetns(netns: Netns, host: string, port: number, opts: ConnectOptions = {}): Socket {
  const family = sys.familyOf(host);
  const fd = socketInNetns(netns, family);
  let socket: Socket;
  try {
    if (opts.sendBufferBytes !== undefined) sys.setSendBuffer(fd, opts.sendBufferBytes);
    if (opts.transparentSource !== undefined) {
      // The connection leaves from an address that is not the pod's (the original client):
      // IP_TRANSPARENT allows the bind, the mark steers the app's replies back to us.
      sys.setTransparent(fd, family);
      sys.setMark(fd, opts.transparentSource.mark);
      sys.setBindAddressNoPort(fd);
      sys.bind(fd, opts.transparentSource.host, 0);
    }
    // allowHalfOpen: a proxied peer's FIN must end only one direction (half-close).
    socket = new Socket({ fd, readable: true, writable: true, allowHalfOpen: true }).setNoDelay(true);
  } catch (e) {
    sys.close(fd);
    throw e;
  }
  return socket.connect(port, host);
}

/**
 * net.ipv4.tcp_migrate_req=1 inside `netns` (Linux 5.14+; it covers IPv6 too): when a
 * draining ztunnel closes a SO_REUSEPORT listener, the connections still in its accept
 * queue move to the successor's listener instead of being reset. Best effort: false
 * when the kernel lacks it (those few queued connections are then reset on close).
 */
export function enableRequestMigration(netns: Netns): boolean {
  try {
    // /proc/sys/net resolves against the opening thread's namespace, which inNetns switches.
    inNetns(netns, () => writeFileSync('/proc/sys/net/ipv4/tcp_migrate_req', '1'));
    return true;
  } catch {
    return false;
  }
}

/** The netns cookie of the namespace at `netnsPath` (what BPF's bpf_get_netns_cookie sees). */
export function netnsCookieOf(netnsPath: string): bigint {
  const fd = socketInNetns(netnsPath, 4);
  try {
    return sys.netnsCookie(fd);
  } finally {
    sys.close(fd);
  }
}
