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
  readonly #closedIds = new Map<number, 'closed' | 'reset'>();

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

  /**
   * The peer stream `id` closed, and how (RFC 9113 §5.1): frames on one we reset are ignored
   * (they may have been in flight), on one closed otherwise they are STREAM_CLOSED. Bounded:
   * an id that fell out is treated as never opened.
   */
  closed(id: number, how: 'closed' | 'reset'): void {
    if (!this.isPeers(id)) return;
    this.#closedIds.set(id, how);
    if (this.#closedIds.size > CLOSED_IDS_KEPT) {
      this.#closedIds.delete(this.#closedIds.keys().next().value as number);
    }
  }

  howClosed(id: number): 'closed' | 'reset' | undefined {
    return this.#closedIds.get(id);
  }

  isPeers(id: number): boolean {
    return (id % 2 === 1) === (this.#role === 'server');
  }

  /** An id its opener has not used yet (§5.1 "idle"). */
  isIdle(id: number): boolean {
    return this.isPeers(id) ? id > this.#lastPeer : id >= this.#next;
  }
}

/** Closed peer stream ids remembered: about a second of churn at high rates. */
const CLOSED_IDS_KEPT = 1024;
