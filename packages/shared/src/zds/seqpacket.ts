import { createRequire } from 'node:module';
import { checkoutPath } from '../runtime/checkout.js';

/**
 * SOCK_SEQPACKET Unix sockets with one passed fd (SCM_RIGHTS), from the small N-API addon
 * in packages/shared/native (built by `make native`). Node has neither. Every socket is
 * non-blocking; readiness comes from a libuv poll handle on Node's own loop.
 */
interface Native {
  socket(): number;
  bind(fd: number, path: string): void;
  listen(fd: number, backlog: number): void;
  connect(fd: number, path: string): void;
  accept(fd: number): number;
  send(fd: number, data: Uint8Array, passFd: number): number;
  recv(fd: number, max: number): ReceivedPacket | null;
  close(fd: number): void;
  watch(fd: number, onReady: (readable: boolean, hangup: boolean) => void): object;
  unwatch(handle: object): void;
  unref(handle: object): void;
}

/** One message as it arrived: `fds` are this process's now and must be closed by the receiver. */
export interface ReceivedPacket {
  data: Buffer;
  fds: number[];
  /** MSG_TRUNC: the message was longer than the buffer and its tail is lost. */
  truncated: boolean;
  /** MSG_CTRUNC: ancillary data (fds) did not fit and was lost. */
  controlTruncated: boolean;
}

export const NATIVE_ADDON = checkoutPath('packages', 'shared', 'native', 'build', 'seqpacket.node');

let native: Native | undefined;

function addon(): Native {
  native ??= createRequire(import.meta.url)(NATIVE_ADDON) as Native;
  return native;
}

/** Why SOCK_SEQPACKET sockets are unavailable here (the addon is not built), or undefined. */
export function seqpacketUnavailableReason(): string | undefined {
  try {
    addon();
    return undefined;
  } catch (e) {
    return `the seqpacket addon did not load (run \`make build\`): ${(e as Error).message}`;
  }
}

/** A connected SOCK_SEQPACKET socket. Messages arrive whole, in order, through `onMessage`. */
export class SeqpacketSocket {
  #fd: number;
  #watch: object | undefined;
  #closed = false;
  readonly #closeListeners: Array<(error?: Error) => void> = [];

  constructor(
    fd: number,
    private readonly maxMessage: number,
    private readonly onMessage: (packet: ReceivedPacket) => void,
  ) {
    this.#fd = fd;
    this.#watch = addon().watch(fd, (readable, hangup) => this.#ready(readable, hangup));
  }

  /** Connects to `path`; throws the errno error (ENOENT, ECONNREFUSED, EAGAIN…) when it cannot. */
  static connect(path: string, maxMessage: number, onMessage: (p: ReceivedPacket) => void): SeqpacketSocket {
    const n = addon();
    const fd = n.socket();
    try {
      n.connect(fd, path);
    } catch (e) {
      n.close(fd);
      throw e;
    }
    return new SeqpacketSocket(fd, maxMessage, onMessage);
  }

  get closed(): boolean {
    return this.#closed;
  }

  get fd(): number {
    return this.#fd;
  }

  onClose(listener: (error?: Error) => void): void {
    if (this.#closed) listener();
    else this.#closeListeners.push(listener);
  }

  /**
   * Sends one message, with `passFd` as SCM_RIGHTS when given. Messages here are small and
   * acknowledged one at a time, so a full socket buffer means a peer that stopped reading:
   * that is an error, not a wait.
   */
  send(data: Uint8Array, passFd?: number): void {
    if (this.#closed) throw new Error('socket is closed');
    const n = addon().send(this.#fd, data, passFd ?? -1);
    if (n < 0)
      throw Object.assign(new Error('sendmsg: peer is not reading (socket buffer full)'), { code: 'EAGAIN' });
  }

  /** Lets the process exit while this socket waits. */
  unref(): void {
    if (this.#watch) addon().unref(this.#watch);
  }

  close(error?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#watch) addon().unwatch(this.#watch);
    this.#watch = undefined;
    addon().close(this.#fd);
    this.#fd = -1;
    for (const l of this.#closeListeners.splice(0)) l(error);
  }

  #ready(readable: boolean, hangup: boolean): void {
    // Drain what is queued (bounded per wakeup so one peer cannot hold the loop), then
    // notice a hangup: messages sent before the peer closed are still delivered.
    for (let i = 0; i < 64 && !this.#closed && (readable || hangup); i++) {
      let packet: ReceivedPacket | null;
      try {
        packet = addon().recv(this.#fd, this.maxMessage);
      } catch (e) {
        this.close(e as Error);
        return;
      }
      if (packet === null) break;
      if (packet.data.length === 0 && packet.fds.length === 0 && !packet.truncated) {
        this.close();
        return;
      }
      this.onMessage(packet);
    }
  }
}

/** A listening SOCK_SEQPACKET socket; `onConnection` gets each accepted socket's fd. */
export class SeqpacketServer {
  #fd: number;
  #watch: object | undefined;

  constructor(path: string, onConnection: (fd: number) => void, backlog = 16) {
    const n = addon();
    this.#fd = n.socket();
    try {
      n.bind(this.#fd, path);
      n.listen(this.#fd, backlog);
    } catch (e) {
      n.close(this.#fd);
      throw e;
    }
    this.#watch = n.watch(this.#fd, () => {
      for (let i = 0; i < 64 && this.#fd >= 0; i++) {
        let fd: number;
        try {
          fd = n.accept(this.#fd);
        } catch {
          return;
        }
        if (fd < 0) return;
        onConnection(fd);
      }
    });
  }

  close(): void {
    if (this.#fd < 0) return;
    if (this.#watch) addon().unwatch(this.#watch);
    addon().close(this.#fd);
    this.#fd = -1;
  }
}

/** Closes fds received from a peer (never throws). */
export function closeFds(fds: readonly number[]): void {
  for (const fd of fds) {
    try {
      addon().close(fd);
    } catch {
      // Already closed.
    }
  }
}
