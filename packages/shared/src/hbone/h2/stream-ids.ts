import { MAX_WINDOW_BYTES } from './frame.js';

/**
 * Stream identifiers on one connection (RFC 9113 §5.1.1): a client opens odd ids, a
 * server even ones (we never push, so a server opens none), each above the last its
 * opener used. What tells a stream we closed from one never opened ("idle", §5.1).
 */
export class StreamIds {
  readonly #role: 'client' | 'server';
  #next = 1;
  #lastPeer = 0;

  constructor(role: 'client' | 'server') {
    this.#role = role;
  }

  /** The highest id the peer opened: GOAWAY's last-stream-id (§6.8). */
  get lastPeer(): number {
    return this.#lastPeer;
  }

  /** Our next id; throws once the 31-bit space is used up (§5.1.1: open a new connection). */
  allocate(): number {
    if (this.#next > MAX_WINDOW_BYTES) throw new Error('stream ids exhausted');
    const id = this.#next;
    this.#next += 2;
    return id;
  }

  /** The peer opened `id` (its HEADERS arrived). */
  peerOpened(id: number): void {
    this.#lastPeer = id;
  }

  isPeers(id: number): boolean {
    return (id % 2 === 1) === (this.#role === 'server');
  }

  /** An id its opener has not used yet (§5.1 "idle"). */
  isIdle(id: number): boolean {
    return this.isPeers(id) ? id > this.#lastPeer : id >= this.#next;
  }
}
