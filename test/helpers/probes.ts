import { connect, createServer, type Server, type Socket } from 'node:net';
import type { Ztunnel } from '@zmesh/ztunnel';

/** An echo server that keeps half-close: it ends its side when the client ends. */
export function startEcho(host: string, port: number): Promise<Server & { sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    s.on('error', () => {});
    s.pipe(s);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve(Object.assign(server, { sockets })));
  });
}

/**
 * Sends a probe through `host:port` and resolves true only if it comes back: the tunnel
 * carried it end to end. A refusal (reset, close, silence for `timeoutMs`) is false.
 */
export function echoes(host: string, port: number, timeoutMs = 2000): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = `probe-${Math.random()}`;
    const socket = connect({ host, port });
    let got = '';
    const done = (value: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(value);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on('data', (d: Buffer) => {
      got += d.toString();
      if (got === probe) done(true);
    });
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
    socket.once('connect', () => socket.write(probe));
  });
}

/** The workload uids an in-process ztunnel holds (its config dump). */
export function workloadUids(z: Ztunnel): string[] {
  return (z.configDump() as { workloads: Array<{ uid: string }> }).workloads.map((w) => w.uid);
}
