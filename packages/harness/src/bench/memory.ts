import type { Socket } from 'node:net';
import { execa } from 'execa';
import type { Endpoint } from './endpoint.js';
import { largestResidentSet, pssBytes, type ResidentSet } from './proc-stat.js';
import { exchangeByte, type Launch, open } from './request-load.js';

export interface MemoryReading {
  /** Largest single proxy process's resident set at rest (ztunnel: node-a, holding the 100 pods). */
  idleLargest: ResidentSet;
  /** (PSS of all the path's processes with `connections` idle connections − at rest) / connections, bytes. */
  perConnection: number;
}

/** Connections opened at once while filling up (a bound on the burst the proxies see). */
const OPEN_CONCURRENCY = 50;
/** How long a client pod may take to open its idle connections. */
const HOLD_READY_TIMEOUT_MS = 120_000;

/**
 * Memory at rest and per idle proxied connection. Each connection exchanges one byte with
 * the echo server first, so it is known to be carried end to end before it goes idle.
 * `settleMs` lets a proxy finish allocating after the last handshake before memory is read.
 * With `launch` the connections are held by a node child in the client pod (`holdIdle`).
 */
export async function measureMemory(
  pids: number[],
  echo: Endpoint,
  connections: number,
  settleMs: number,
  pod?: { launch: Launch; cpu: string },
): Promise<MemoryReading> {
  await delay(settleMs);
  const idleLargest = await largestResidentSet(pids);
  const before = await pssBytes(pids);
  const release = pod ? await holdInPod(pod, echo, connections) : await holdHere(echo, connections);
  try {
    await delay(settleMs);
    const after = await pssBytes(pids);
    return { idleLargest, perConnection: (after - before) / connections };
  } finally {
    await release();
    await delay(200);
  }
}

/** Opens `n` connections, each carried end to end (one byte echoed) before the next batch. */
async function openIdle(echo: Endpoint, n: number, sockets: Socket[]): Promise<void> {
  for (let i = 0; i < n; i += OPEN_CONCURRENCY) {
    const batch = Array.from({ length: Math.min(OPEN_CONCURRENCY, n - i) }, async () => {
      const s = await open(echo);
      s.on('error', () => {});
      sockets.push(s);
      await exchangeByte(s);
    });
    await Promise.all(batch);
  }
}

async function holdHere(echo: Endpoint, n: number): Promise<() => Promise<void>> {
  const sockets: Socket[] = [];
  const release = async () => {
    for (const s of sockets) s.destroy();
  };
  try {
    await openIdle(echo, n, sockets);
  } catch (e) {
    await release();
    throw e;
  }
  return release;
}

/**
 * In a client pod (run by `holdInPod` through `launch`): opens the idle connections, says
 * "ready", and holds them until its stdin ends. A pod's process is not stopped by a signal
 * to the harness's child (docs/design.md §10), so it ends itself.
 * @public imported by name from the pod's inline script in `holdInPod`, which knip cannot see.
 */
export async function holdIdle(echo: Endpoint, n: number): Promise<void> {
  const sockets: Socket[] = [];
  await openIdle(echo, n, sockets);
  console.log('ready');
  process.stdin.resume();
  await new Promise((r) => process.stdin.once('end', r));
  for (const s of sockets) s.destroy();
}

async function holdInPod(
  pod: { launch: Launch; cpu: string },
  echo: Endpoint,
  n: number,
): Promise<() => Promise<void>> {
  const script =
    `const m = await import(${JSON.stringify(import.meta.url)});` +
    `await m.holdIdle(${JSON.stringify(echo)}, ${n}); process.exit(0);`;
  const [file, ...args] = pod.launch([
    'taskset',
    '-c',
    pod.cpu,
    process.execPath,
    '--input-type=module',
    '-e',
    script,
  ]);
  const child = execa(file!, args, { reject: false, stdin: 'pipe', stdout: 'pipe', stderr: 'pipe' });
  const release = async () => {
    child.stdin?.end();
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await child;
    clearTimeout(timer);
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new Error(`idle connections not open in the client pod after ${HOLD_READY_TIMEOUT_MS} ms`)),
        HOLD_READY_TIMEOUT_MS,
      );
      child.stdout?.on('data', (d: Buffer) => {
        if (!d.toString().includes('ready')) return;
        clearTimeout(timer);
        resolve();
      });
      void child.then((r) => {
        clearTimeout(timer);
        reject(new Error(`holding idle connections in the client pod: ${String(r.stderr).slice(0, 300)}`));
      });
    });
  } catch (e) {
    await release();
    throw e;
  }
  return release;
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
