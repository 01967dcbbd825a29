import type { Duplex } from 'node:stream';

export type DetectedProtocol = 'h1' | 'h2' | 'tcp';

/** RFC 9113 §3.4: the client connection preface of HTTP/2 with prior knowledge. */
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** Longest HTTP/1.1 method we wait for before deciding (RFC 9110 methods are short tokens). */
const MAX_METHOD_LENGTH = 20;
/**
 * How long to wait for the client's first bytes. A server-speaks-first protocol (SMTP,
 * MySQL) sends nothing, so silence means opaque TCP, as with Istio's protocol sniffing.
 */
const DETECT_TIMEOUT_MS = 300;

/**
 * Reads just enough of the tunnel to tell HTTP/2 prior knowledge, HTTP/1.1 and anything
 * else apart, then puts the bytes back (unshift) for whoever serves the protocol.
 */
export function detectProtocol(stream: Duplex, timeoutMs = DETECT_TIMEOUT_MS): Promise<DetectedProtocol> {
  return new Promise((resolve) => {
    let seen = Buffer.alloc(0);
    const done = (p: DetectedProtocol) => {
      clearTimeout(timer);
      stream.off('data', onData).off('end', onEnd);
      stream.pause();
      if (seen.length > 0) stream.unshift(seen);
      resolve(p);
    };
    const onData = (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      const verdict = classify(seen);
      if (verdict) done(verdict);
    };
    const onEnd = () => done(classify(seen) ?? 'tcp');
    const timer = setTimeout(() => done(classify(seen) ?? 'tcp'), timeoutMs);
    stream.on('data', onData).once('end', onEnd);
  });
}

/** undefined: not enough bytes yet to tell. */
export function classify(b: Buffer): DetectedProtocol | undefined {
  const n = Math.min(b.length, H2_PREFACE.length);
  if (b.subarray(0, n).equals(H2_PREFACE.subarray(0, n)))
    return b.length >= H2_PREFACE.length ? 'h2' : undefined;
  for (let i = 0; i < Math.min(b.length, MAX_METHOD_LENGTH + 1); i++) {
    const c = b[i]!;
    if (c === 0x20) return i > 0 ? 'h1' : 'tcp';
    // RFC 9110 §9.1: method is a token; registered methods are upper-case letters and '-'.
    if (!((c >= 0x41 && c <= 0x5a) || c === 0x2d)) return 'tcp';
  }
  return b.length > MAX_METHOD_LENGTH ? 'tcp' : undefined;
}
