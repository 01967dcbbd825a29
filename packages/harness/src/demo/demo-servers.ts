import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createTcpServer } from 'node:net';

/**
 * Real servers for the demo when the Debian peers are missing: an HTTP server that
 * reports what it saw, and a sink that counts bulk bytes and echoes the count.
 */
export function startHttpServer(host: string, port: number, name: string): Promise<Server> {
  const server = createHttpServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(
      `hello from ${name}: ${req.method} ${req.url} (peer ${req.socket.remoteAddress}:${req.socket.remotePort})\n`,
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve(server));
  });
}

/** Reads everything, then answers with the byte count: a bulk transfer that checks itself. */
export function startSinkServer(host: string, port: number): Promise<import('node:net').Server> {
  const server = createTcpServer({ allowHalfOpen: true }, (socket) => {
    let bytes = 0;
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    socket.on('end', () => socket.end(`${bytes}\n`));
    socket.on('error', () => {});
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve(server));
  });
}
