import { DEFAULT_WINDOW_BYTES } from './frame.js';
import type { H2Stream } from './h2-stream.js';

/** WINDOW_UPDATEs are batched up to this much (and a quarter of the window). */
const GRANT_BATCH_BYTES = 1024 * 1024;

/**
 * Our receive side of flow control (RFC 9113 §6.9): what the peer may still send, on the
 * connection and on each stream, and when to grant it more.
 *
 * The connection window is granted back as bytes arrive, whether or not a stream's reader
 * took them: a stalled reader then stalls only its own stream, and what a connection makes
 * us hold is bounded by its streams' windows instead (`StreamWindows` keeps their sum
 * bounded). A stream's window is granted back as its reader takes the bytes, up to the
 * current SETTINGS_INITIAL_WINDOW_SIZE.
 *
 * That setting can change while streams are open (§6.9.2): the peer applies the change to
 * its streams when it reads our SETTINGS, and acknowledges after. Each stream's
 * `recvWindow` follows the acknowledged value; until the ACK, a peer that already applied
 * a larger window may send up to `growth` more, which the checks allow for.
 */
export class ReceiveWindows {
  /** The connection window we keep the peer at. */
  readonly #connectionTarget: number;
  #connection = DEFAULT_WINDOW_BYTES;
  /** SETTINGS_INITIAL_WINDOW_SIZE as last sent, and as last acknowledged. */
  #sent: number;
  #acked = DEFAULT_WINDOW_BYTES;
  #growth = 0;
  /** Our SETTINGS in flight, oldest first: the window each carried, if any. */
  readonly #unacked: (number | undefined)[] = [];

  constructor(initialStreamWindow: number, connectionWindow: number) {
    this.#sent = initialStreamWindow;
    this.#connectionTarget = connectionWindow;
  }

  /** The WINDOW_UPDATE on stream 0 that raises the connection window from its default, or 0. */
  openConnection(): number {
    const raise = Math.max(0, this.#connectionTarget - this.#connection);
    this.#connection += raise;
    return raise;
  }

  /**
   * A DATA frame of `length` bytes arrives: false if it overruns the connection window
   * (FLOW_CONTROL_ERROR), else the increment to grant back now (0 to wait for more).
   */
  connectionArrival(length: number): number | false {
    if (length > this.#connection) return false;
    this.#connection -= length;
    if (this.#connection > this.#connectionTarget / 2) return 0;
    const grant = this.#connectionTarget - this.#connection;
    this.#connection += grant;
    return grant;
  }

  /** The window a new stream starts with, as the peer counts it after the SETTINGS it acknowledged. */
  get newStream(): number {
    return this.#acked;
  }

  /** Whether `length` more bytes fit the stream's window (allowing for SETTINGS in flight). */
  fits(stream: H2Stream, length: number): boolean {
    return length <= stream.recvWindow + this.#growth;
  }

  /** The increment to grant the stream now: up to the window, less what its reader holds, batched. */
  streamGrant(stream: H2Stream): number {
    const target = this.#sent;
    const grant = target - stream.readableLength - (stream.recvWindow + this.#growth);
    if (grant <= 0 || grant < Math.min(target / 4, GRANT_BATCH_BYTES)) return 0;
    stream.recvWindow += grant;
    return grant;
  }

  /** A SETTINGS frame goes out; `window` is its SETTINGS_INITIAL_WINDOW_SIZE, if it has one. */
  settingsSent(window: number | undefined): void {
    if (window !== undefined) this.#sent = window;
    this.#unacked.push(window);
    this.#growth = this.#pendingGrowth();
  }

  /** The peer acknowledged our oldest SETTINGS: its window change now counts for `streams`. */
  settingsAcked(streams: Iterable<H2Stream>): void {
    if (this.#unacked.length === 0) return;
    const window = this.#unacked.shift();
    if (window !== undefined) {
      const delta = window - this.#acked;
      for (const s of streams) s.recvWindow += delta;
      this.#acked = window;
    }
    this.#growth = this.#pendingGrowth();
  }

  #pendingGrowth(): number {
    let w = this.#acked;
    for (const u of this.#unacked) if (u !== undefined && u > w) w = u;
    return w - this.#acked;
  }
}
