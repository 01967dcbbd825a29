import { pingFrame } from './frame.js';

/** Pings unanswered at once; more are refused rather than queued. */
const MAX_PINGS_IN_FLIGHT = 16;

/** Our PINGs in flight (RFC 9113 §6.7), each told its round trip when its ACK comes back. */
export class Pings {
  readonly #waiting = new Map<number, (error: Error | null) => void>();
  #seq = 0;

  /** The PING frame to send, or undefined when MAX_PINGS_IN_FLIGHT are unanswered. */
  start(callback: (error: Error | null, ms: number) => void): Buffer | undefined {
    if (this.#waiting.size >= MAX_PINGS_IN_FLIGHT) return undefined;
    this.#seq = (this.#seq + 1) >>> 0;
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(this.#seq, 4);
    const sent = performance.now();
    this.#waiting.set(this.#seq, (error) => callback(error, performance.now() - sent));
    return pingFrame(payload, false);
  }

  /** A PING ACK's payload; one we did not send is ignored. */
  acked(payload: Buffer): void {
    const seq = payload.readUInt32BE(4);
    const done = this.#waiting.get(seq);
    this.#waiting.delete(seq);
    done?.(null);
  }

  /** The connection is gone: every ping waiting fails. */
  failAll(error: Error): void {
    for (const done of this.#waiting.values()) done(error);
    this.#waiting.clear();
  }
}
