import type { IncomingMessage, ServerResponse } from 'node:http';
import { Session } from 'node:inspector/promises';
import { logger } from '../log/index.js';

const log = logger('admin');

/** `GET /debug/cpu?seconds=N`: N in 1..MAX, default DEFAULT. */
const CPU_PROFILE_DEFAULT_SECONDS = 10;
export const CPU_PROFILE_MAX_SECONDS = 60;
/** A snapshot larger than this is cut off (the response is aborted, never half-sent as complete). */
export const HEAP_SNAPSHOT_MAX_BYTES = 512 * 1024 * 1024;
const CPU_PROFILE_MAX_BYTES = 64 * 1024 * 1024;

/** 127.0.0.0/8, ::1 and their IPv4-mapped forms. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  return a === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(a);
}

/**
 * Heap snapshots and CPU profiles of this process through node:inspector, for an admin
 * listener: `GET /debug/heap` (a .heapsnapshot, JSON) and `GET /debug/cpu?seconds=N` (a
 * .cpuprofile, JSON). Only from loopback (the listener may be on a pod address), one at a
 * time (429 while one runs: a snapshot stops the event loop for its duration), bounded in N
 * and in size. Never throws: a failure is a 500 and a log line.
 */
export class InspectorProfiles {
  #busy = false;

  /** The routes this serves, for an admin server's table. */
  static readonly PATHS = ['/debug/heap', '/debug/cpu'] as const;

  async handle(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    if (req.method !== 'GET') return reply(res, 405, 'GET only');
    if (!isLoopback(req.socket.remoteAddress)) return reply(res, 403, 'profiles are served to loopback only');
    let seconds = 0;
    if (url.pathname === '/debug/cpu') {
      const raw = url.searchParams.get('seconds') ?? String(CPU_PROFILE_DEFAULT_SECONDS);
      seconds = /^\d{1,3}$/.test(raw) ? Number(raw) : 0;
      if (seconds < 1 || seconds > CPU_PROFILE_MAX_SECONDS)
        return reply(res, 400, `seconds: want 1..${CPU_PROFILE_MAX_SECONDS}, got ${raw}`);
    } else if (url.pathname !== '/debug/heap') return reply(res, 404, 'not found');
    if (this.#busy) return reply(res, 429, 'a profile is already being taken');
    this.#busy = true;
    const session = new Session();
    try {
      session.connect();
      if (seconds > 0) await cpuProfile(session, res, seconds);
      else await heapSnapshot(session, res);
    } catch (e) {
      log.warn({ path: url.pathname, err: (e as Error).message }, 'profile failed');
      if (!res.headersSent) reply(res, 500, (e as Error).message);
      else res.destroy();
    } finally {
      session.disconnect();
      this.#busy = false;
    }
  }
}

async function heapSnapshot(session: Session, res: ServerResponse): Promise<void> {
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-disposition': `attachment; filename="zmesh-${process.pid}.heapsnapshot"`,
  });
  let bytes = 0;
  let cut = false;
  session.on('HeapProfiler.addHeapSnapshotChunk', (m) => {
    if (cut) return;
    const chunk = (m.params as { chunk: string }).chunk;
    bytes += Buffer.byteLength(chunk);
    if (bytes > HEAP_SNAPSHOT_MAX_BYTES) {
      cut = true;
      return;
    }
    res.write(chunk);
  });
  await session.post('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
  if (cut) {
    log.warn({ limit: HEAP_SNAPSHOT_MAX_BYTES }, 'heap snapshot over its size bound: response aborted');
    res.destroy();
    return;
  }
  res.end();
}

async function cpuProfile(session: Session, res: ServerResponse, seconds: number): Promise<void> {
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  // The client may leave while we wait: stop early then, the profile is nobody's.
  const gone = new Promise<void>((resolve) => res.once('close', () => resolve()));
  await Promise.race([new Promise((r) => setTimeout(r, seconds * 1000)), gone]);
  const { profile } = await session.post('Profiler.stop');
  await session.post('Profiler.disable');
  if (res.destroyed) return;
  const body = JSON.stringify(profile);
  if (Buffer.byteLength(body) > CPU_PROFILE_MAX_BYTES) return reply(res, 507, 'profile over its size bound');
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-disposition': `attachment; filename="zmesh-${process.pid}.cpuprofile"`,
  });
  res.end(body);
}

function reply(res: ServerResponse, status: number, error: string): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(`${JSON.stringify({ error })}\n`);
}
