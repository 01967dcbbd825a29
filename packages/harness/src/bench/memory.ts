import type { Socket } from 'node:net';
import type { Endpoint } from './peer-paths.js';
import { pssBytes, rssBytes } from './proc-stat.js';
import { exchangeByte, open } from './request-load.js';

export interface MemoryReading {
  /** Largest single proxy process's RSS at rest, bytes (ztunnel: node-a, holding the 100 pods). */
  idleRssMax: number;
  /** (PSS of all the path's processes with `connections` idle connections − at rest) / connections, bytes. */
  perConnection: number;
}

/** Connections opened at once while filling up (a bound on the burst the proxies see). */
const OPEN_CONCURRENCY = 50;

/**
 * Memory at rest and per idle proxied connection. Each connection exchanges one byte with
 * the echo server first, so it is known to be carried end to end before it goes idle.
 * `settleMs` lets a proxy finish allocating after the last handshake before memory is read.
 */
export async function measureMemory(
  pids: number[],
  echo: Endpoint,
  connections: number,
  settleMs: number,
): Promise<MemoryReading> {
  await delay(settleMs);
  const idleRssMax = Math.max(0, ...(await Promise.all(pids.map(rssBytes))));
  const before = await pssBytes(pids);
  const sockets: Socket[] = [];
  try {
    for (let i = 0; i < connections; i += OPEN_CONCURRENCY) {
      const batch = Array.from({ length: Math.min(OPEN_CONCURRENCY, connections - i) }, async () => {
        const s = await open(echo);
        s.on('error', () => {});
        sockets.push(s);
        await exchangeByte(s);
      });
      await Promise.all(batch);
    }
    await delay(settleMs);
    const after = await pssBytes(pids);
    return { idleRssMax, perConnection: (after - before) / connections };
  } finally {
    for (const s of sockets) s.destroy();
    await delay(200);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
