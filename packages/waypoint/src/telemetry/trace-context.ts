import { randomBytes } from 'node:crypto';

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

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
  return `00-${randomBytes(16).toString('hex')}-${spanId()}-00`;
}

function spanId(): string {
  for (;;) {
    const id = randomBytes(8).toString('hex');
    if (id !== '0000000000000000') return id;
  }
}
