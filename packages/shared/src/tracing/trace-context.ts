import { randomFillSync } from 'node:crypto';

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A traceparent that starts a trace (W3C Trace Context §3.2), e.g. ztunnel's on a new tunnel. */
export function newTraceparent(): string {
  return `00-${randomHex(16)}-${spanId()}-00`;
}

/**
 * W3C Trace Context §3.2: the waypoint is a hop, so it keeps the trace id and flags of
 * the incoming traceparent (request header first, then the tunnel's) and sends a new
 * span id (child span); with none valid it starts a trace.
 */
export function childTraceparent(...candidates: Array<string | undefined>): string {
  for (const c of candidates) {
    const m = c === undefined ? null : TRACEPARENT.exec(c);
    if (m && !/^0+$/.test(m[1]!) && !/^0+$/.test(m[2]!)) return `00-${m[1]}-${spanId()}-${m[3]}`;
  }
  return newTraceparent();
}

function spanId(): string {
  for (;;) {
    const id = randomHex(8);
    if (id !== '0000000000000000') return id;
  }
}

/**
 * Random ids come from a 4 KiB pool refilled from the CSPRNG when spent: one
 * `randomBytes` call per id cost 2% of the waypoint's CPU and 1.4% of ztunnel's under a
 * connection burst. Trace ids are not secrets.
 */
const pool = Buffer.allocUnsafe(4096);
let used = pool.length;

function randomHex(bytes: number): string {
  if (used + bytes > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += bytes;
  return pool.toString('hex', used - bytes, used);
}
