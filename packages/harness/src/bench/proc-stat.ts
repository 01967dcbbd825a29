import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** Clock ticks per second for /proc/<pid>/stat times (USER_HZ; 100 on every Linux we run on). */
const USER_HZ = 100;

/** A process and every live descendant, read from /proc/<pid>/task/<tid>/children. */
async function processTree(root: number): Promise<number[]> {
  const out: number[] = [];
  const queue = [root];
  // Bound: a fork-per-connection relay (socat) has one child per open connection.
  const MAX_TREE = 20_000;
  while (queue.length > 0 && out.length < MAX_TREE) {
    const pid = queue.shift()!;
    out.push(pid);
    const tasks = await readdirSafe(`/proc/${pid}/task`);
    for (const tid of tasks) {
      const children = await readSafe(`/proc/${pid}/task/${tid}/children`);
      for (const c of children.split(/\s+/)) if (c) queue.push(Number(c));
    }
  }
  return out;
}

/**
 * CPU seconds used so far by the processes rooted at `roots`: user + system of each live
 * process, plus the reaped children's times accounted to each root (a relay that forks
 * per connection spends its CPU in children that come and go).
 */
export async function cpuSeconds(roots: number[]): Promise<number> {
  let ticks = 0;
  for (const root of roots) {
    for (const pid of await processTree(root)) {
      const f = statFields(await readSafe(`/proc/${pid}/stat`));
      if (!f) continue;
      // Fields 14..17 (1-based): utime stime cutime cstime. Children's times only at the root.
      ticks += f[13]! + f[14]! + (pid === root ? f[15]! + f[16]! : 0);
    }
  }
  return ticks / USER_HZ;
}

/** One process's resident set in bytes, from /proc/<pid>/status; zeros once it has gone. */
export interface ResidentSet {
  /** VmRSS: anonymous + file-backed + shared memory. */
  rss: number;
  /** RssAnon: heap, stacks, copied-on-write pages: memory only this process holds. */
  anon: number;
  /**
   * RssFile: mapped file pages (the executable, shared libraries). They are clean, shared
   * with every process that maps the same file and stay in the page cache once unmapped.
   */
  file: number;
}

export async function residentSet(pid: number): Promise<ResidentSet> {
  return parseResidentSet(await readSafe(`/proc/${pid}/status`));
}

/** The resident set of the largest (by RSS) of `pids`; zeros when there are none. */
export async function largestResidentSet(pids: number[]): Promise<ResidentSet> {
  const sets = await Promise.all(pids.map(residentSet));
  return sets.reduce((a, b) => (b.rss > a.rss ? b : a), { rss: 0, anon: 0, file: 0 });
}

/**
 * Memory of the processes rooted at `roots`, in bytes: the sum of proportional set sizes,
 * so that pages a forking relay's children share are counted once, not once per child.
 * For a single process it differs from RSS only by its share of shared libraries.
 */
export async function pssBytes(roots: number[]): Promise<number> {
  let kb = 0;
  for (const root of roots) {
    for (const pid of await processTree(root)) {
      const m = /^Pss:\s+(\d+) kB/m.exec(await readSafe(`/proc/${pid}/smaps_rollup`));
      if (m) kb += Number(m[1]);
    }
  }
  return kb * 1024;
}

/**
 * One process's user + system CPU seconds (no children), read synchronously: for a reading
 * taken at an exact moment from a synchronous callback or a timer. A process that has gone
 * reads 0.
 */
export function processCpuSecondsSync(pid: number): number {
  const f = statFields(readSafeSync(`/proc/${pid}/stat`));
  return f ? (f[13]! + f[14]!) / USER_HZ : 0;
}

/** `residentSet`, read synchronously. */
export function residentSetSync(pid: number): ResidentSet {
  return parseResidentSet(readSafeSync(`/proc/${pid}/status`));
}

function parseResidentSet(status: string): ResidentSet {
  const kb = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? Number(m[1]) * 1024 : 0;
  };
  return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile') };
}

function statFields(stat: string): number[] | undefined {
  // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
  const close = stat.lastIndexOf(')');
  if (close < 0) return undefined;
  const rest = stat
    .slice(close + 2)
    .split(' ')
    .map(Number);
  // rest[0] is field 3 (state); pad so that index i is field i+1.
  return [0, 0, ...rest];
}

async function readSafe(path: string): Promise<string> {
  return readFile(path, 'utf8').catch(() => '');
}

function readSafeSync(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

async function readdirSafe(path: string): Promise<string[]> {
  const { readdir } = await import('node:fs/promises');
  return readdir(path).catch(() => []);
}
