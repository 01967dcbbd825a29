import { readFile } from 'node:fs/promises';

/** Where a load generator connects. */
export interface Endpoint {
  host: string;
  port: number;
}

/**
 * Waits until something listens on host:port, read from /proc/net/tcp rather than by
 * connecting: a probe connection would reach the server behind the proxy and confuse
 * servers such as iperf3 that expect every connection to be a test.
 */
export async function waitListening(
  host: string,
  port: number,
  timeoutMs = 15_000,
  pid?: number,
): Promise<void> {
  const want = `${host
    .split('.')
    .reverse()
    .map((o) => Number(o).toString(16).padStart(2, '0'))
    .join('')}:${port.toString(16).padStart(4, '0')}`.toUpperCase();
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const table = await readFile(pid ? `/proc/${pid}/net/tcp` : '/proc/net/tcp', 'utf8').catch(() => '');
    // Column 2 is local address, column 4 the state; 0A is LISTEN.
    if (table.split('\n').some((l) => l.trim().split(/\s+/)[1] === want && l.trim().split(/\s+/)[3] === '0A'))
      return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listening on ${host}:${port} after ${timeoutMs} ms`);
}
