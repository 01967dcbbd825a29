import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type Server, type Socket } from 'node:net';
import { execa, type ResultPromise } from 'execa';
import { stopChild } from '../local/ztunnel-process.js';
import { waitListening } from './endpoint.js';
import { startIperfServer } from './iperf.js';

/** The servers every path leads to, all on the bench's server address. */
export interface Target {
  name: TargetName;
  host: string;
  port: number;
}

export type TargetName = 'iperf3' | 'redis' | 'echo' | 'http';

/** 1 KiB body: the HTTP workload's response size. */
export const HTTP_BODY_BYTES = 1024;

export interface RunningTargets {
  targets: Target[];
  /** Sockets the echo server holds open (the idle-connection memory test counts them). */
  echoConnections(): number;
  close(): Promise<void>;
}

/**
 * Starts the servers: iperf3 and redis-server as pinned child processes on the load CPU,
 * a byte echo and a 1 KiB HTTP responder inside this (pinned) process.
 */
export async function startTargets(host: string, cpu: string, dir: string): Promise<RunningTargets> {
  const ports: Record<TargetName, number> = { iperf3: 5201, redis: 6379, echo: 7007, http: 8080 };
  const children: ResultPromise[] = [];
  const sockets = new Set<Socket>();
  const echo = createServer({ noDelay: true }, (s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.once('close', () => sockets.delete(s));
    s.pipe(s);
  });
  const body = Buffer.alloc(HTTP_BODY_BYTES, 'z');
  const http = createHttpServer({ keepAliveTimeout: 60_000 }, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
    res.end(body);
  });
  const stop = async () => {
    for (const s of sockets) s.destroy();
    http.closeAllConnections();
    await Promise.all([close(echo), close(http), ...children.map((c) => stopChild(c))]);
  };
  const names: TargetName[] = ['iperf3', 'echo', 'http'];
  try {
    // This process's own servers first: if another bench holds the ports, this fails here,
    // before any child server starts (its readiness check would reach the other bench's).
    await Promise.all([listen(echo, host, ports.echo), listen(http, host, ports.http)]);
    children.push(startIperfServer(host, ports.iperf3, cpu));
    if (await onPath('redis-server')) {
      children.push(startRedis(host, ports.redis, cpu, dir));
      names.splice(1, 0, 'redis');
    }
    await Promise.all(names.map((n) => waitListening(host, ports[n])));
  } catch (e) {
    await stop();
    const busy = (e as NodeJS.ErrnoException).code === 'EADDRINUSE';
    throw new Error(
      busy
        ? `the bench's servers cannot listen on ${host} (address in use): is another zmesh bench running?`
        : `the bench's servers did not start on ${host}: ${(e as Error).message}`,
      { cause: e },
    );
  }
  return {
    targets: names.map((name) => ({ name, host, port: ports[name] })),
    echoConnections: () => sockets.size,
    close: stop,
  };
}

function startRedis(host: string, port: number, cpu: string, dir: string): ResultPromise {
  const args = ['--bind', host, '--port', String(port), '--save', '', '--appendonly', 'no'];
  args.push('--protected-mode', 'no', '--dir', dir, '--maxclients', '10000', '--loglevel', 'warning');
  return execa('taskset', ['-c', cpu, 'redis-server', ...args], { reject: false, stdio: 'ignore' });
}

function listen(server: Server | HttpServer, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port, backlog: 4096 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function close(server: Server | HttpServer): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

export async function onPath(bin: string): Promise<boolean> {
  return (await execa('which', [bin], { reject: false })).exitCode === 0;
}
