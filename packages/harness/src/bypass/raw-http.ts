import * as http from 'node:http';
import { connect, type Socket } from 'node:net';

/**
 * Raw HTTP/1.1 on both ends of an L7 path, for requests no HTTP client would send and for
 * proof of what an app was actually given: the L7 bypass attempts and the waypoint's tests.
 */

/** One request as an app received it: its line, its headers and its whole body. */
export interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export interface RecordingApp {
  received: Received[];
  /** Every byte every connection carried, in arrival order per connection. */
  bytes(): string;
  close(): void;
}

/**
 * An app that reports exactly what it received: a plain Node HTTP/1.1 server with no
 * 'upgrade' listener (it ignores upgrades, as most apps do), recording every request in
 * order and every byte on every connection. It answers 200 with what it saw.
 */
export async function startRecordingApp(
  host: string,
  port: number,
  /** Several apps may record into one list, in arrival order. */
  received: Received[] = [],
): Promise<RecordingApp> {
  const raw: Buffer[] = [];
  const sockets = new Set<Socket>();
  const server = http.createServer((req, res) => {
    const seen: Received = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: '' };
    received.push(seen);
    req.setEncoding('latin1');
    req.on('data', (d: string) => {
      seen.body += d;
    });
    req.on('end', () => {
      const body = JSON.stringify({ method: seen.method, url: seen.url, body: seen.body });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('data', (d: Buffer) => raw.push(d));
    s.once('close', () => sockets.delete(s));
  });
  server.on('clientError', (_e, s) => s.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve());
  });
  return {
    received,
    bytes: () => Buffer.concat(raw).toString('latin1'),
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/**
 * Writes `bytes` as they are on a fresh TCP connection and reads until the peer closes (or
 * `idleMs` passes without data). For requests no HTTP client would send.
 */
export function rawExchange(host: string, port: number, bytes: string, idleMs = 1500): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const sock = connect({ host, port });
    let idle: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(idle);
      sock.destroy();
      resolve(Buffer.concat(chunks).toString('latin1'));
    };
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(done, idleMs);
    };
    sock.once('connect', () => {
      sock.write(bytes, 'latin1');
      arm();
    });
    sock.on('data', (d: Buffer) => {
      chunks.push(d);
      arm();
    });
    sock.once('close', done);
    sock.once('error', (e) => (chunks.length > 0 ? done() : reject(e)));
  });
}

/** The status codes of every response in a raw HTTP/1.1 reply stream, in order. */
export function statusesOf(reply: string): number[] {
  return [...reply.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
}
