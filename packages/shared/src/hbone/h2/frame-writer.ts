import type { Duplex } from 'node:stream';

/**
 * Bytes queued on the socket beyond which DATA waits for room: the HTTP/2 windows bound
 * what the peer lets us send, this bounds what we hold for a peer that reads slowly.
 */
const SOCKET_HIGH_WATER_BYTES = 512 * 1024;
/**
 * Control frames (PING and SETTINGS acknowledgements, resets) we let queue beyond that for
 * a peer that sends them but does not read ours: a flood (CVE-2019-9512, -9515) ends the
 * connection instead of growing our memory.
 */
const CONTROL_BACKLOG_BYTES = 1024 * 1024;
/** How long end() lets queued frames (a GOAWAY) leave before the socket is cut. */
const END_GRACE_MS = 250;

/**
 * Writes frames to the socket. Writes are held (corked) until the event loop's check
 * phase, so that the frames one turn produces (the DATA of several streams, their
 * WINDOW_UPDATEs) leave in one writev and, over TLS, in as few records as they fill.
 */
export class FrameWriter {
  readonly #socket: Duplex;
  #corked = false;
  /** Who waits for room below SOCKET_HIGH_WATER_BYTES (DATA that found the socket full). */
  #roomWaiters: (() => void)[] = [];

  constructor(socket: Duplex) {
    this.#socket = socket;
  }

  write(buf: Buffer): void {
    const socket = this.#socket;
    if (socket.destroyed || socket.writableEnded) return;
    if (!this.#corked) {
      this.#corked = true;
      socket.cork();
      setImmediate(this.#uncork);
    }
    socket.write(buf);
  }

  readonly #uncork = () => {
    if (!this.#corked) return;
    this.#corked = false;
    if (this.#roomWaiters.length > 0) this.#markBatch();
    this.#socket.uncork();
  };

  /**
   * An empty write at the end of a batch: its callback runs once everything before it has
   * left, which is when waiting DATA may go on. 'drain' would not do: it fires only once
   * the socket is empty, and a stream whose window keeps opening (a bulk upload) keeps it
   * from ever emptying, which held small requests behind it for seconds.
   */
  #markBatch(): void {
    this.#socket.write(EMPTY, this.#batchLeft);
  }

  readonly #batchLeft = () => {
    if (this.#roomWaiters.length === 0 || this.full) return;
    const waiters = this.#roomWaiters;
    this.#roomWaiters = [];
    for (const w of waiters) w();
  };

  /** DATA must wait: the socket holds SOCKET_HIGH_WATER_BYTES already. */
  get full(): boolean {
    return this.#socket.writableLength >= SOCKET_HIGH_WATER_BYTES;
  }

  /** The peer has left CONTROL_BACKLOG_BYTES of our answers unread beyond the DATA bound. */
  get flooded(): boolean {
    return this.#socket.writableLength > SOCKET_HIGH_WATER_BYTES + CONTROL_BACKLOG_BYTES;
  }

  /** Calls `wake` once the socket is below its bound again (each caller once, however often asked). */
  onRoom(wake: () => void): void {
    if (this.#roomWaiters.includes(wake)) return;
    this.#roomWaiters.push(wake);
    const socket = this.#socket;
    // With no batch open, nothing else would tell us when the queued bytes have left.
    if (!this.#corked && !socket.destroyed && !socket.writableEnded) this.#markBatch();
  }

  get waitingRoom(): boolean {
    return this.#roomWaiters.length > 0;
  }

  /** Flushes what is queued, ends the socket, and cuts it if it has not closed within END_GRACE_MS. */
  end(): void {
    const socket = this.#socket;
    this.#roomWaiters = [];
    if (socket.destroyed) return;
    this.#uncork();
    if (socket.writableEnded) socket.destroy();
    else socket.end();
    setTimeout(() => socket.destroy(), END_GRACE_MS).unref();
  }
}

const EMPTY = Buffer.alloc(0);
