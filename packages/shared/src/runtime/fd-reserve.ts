import { readdirSync, readFileSync } from 'node:fs';
import { ZmeshError } from '../errors/index.js';

/** File descriptors kept free for established flows' upstreams, control traffic, logs and metrics. */
export const DEFAULT_FD_RESERVE = 256;
/** How long a count of /proc/self/fd is trusted (plus the connections admitted since). */
const SAMPLE_MS = 50;

/** RLIMIT_NOFILE as the kernel reports it for this process; undefined where /proc is not there. */
export function nofileLimit(): { soft: number; hard: number } | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const [soft, hard] = (line?.slice('Max open files'.length).trim().split(/\s+/) ?? []).map((v) =>
      v === 'unlimited' ? Number.POSITIVE_INFINITY : Number(v),
    );
    if (soft === undefined || hard === undefined || Number.isNaN(soft) || Number.isNaN(hard))
      return undefined;
    return { soft, hard };
  } catch {
    return undefined;
  }
}

export function openFdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

export interface FdReserveInputs {
  reserve?: number;
  /** The soft RLIMIT_NOFILE; default read from /proc/self/limits at construction. */
  limit?: number;
  count?: () => number;
  now?: () => number;
}

/**
 * Refuses new inbound connections while fewer than `reserve` fds are left under the soft
 * RLIMIT_NOFILE (ZM_ERR_FD_RESERVE), so a flood of connections degrades into refusals
 * instead of EMFILE inside established flows, timers or the metrics endpoint (issue 38:
 * EMFILE from process.memoryUsage() once killed the process). Node raises the soft limit
 * to the hard one at start; the count is sampled (readdir of /proc/self/fd) at most every
 * SAMPLE_MS, and each connection admitted since is added to it.
 */
export class FdReserve {
  readonly reserve: number;
  readonly limit: number;
  readonly #count: () => number;
  readonly #now: () => number;
  #sampled = 0;
  #sampledAt = Number.NEGATIVE_INFINITY;
  #since = 0;

  constructor(inputs: FdReserveInputs = {}) {
    this.reserve = inputs.reserve ?? DEFAULT_FD_RESERVE;
    this.limit = inputs.limit ?? nofileLimit()?.soft ?? Number.POSITIVE_INFINITY;
    this.#count = inputs.count ?? openFdCount;
    this.#now = inputs.now ?? (() => performance.now());
  }

  /** fds open now, as far as the last sample and the admissions since tell. */
  get open(): number {
    const now = this.#now();
    if (now - this.#sampledAt >= SAMPLE_MS) {
      this.#sampled = this.#count();
      this.#sampledAt = now;
      this.#since = 0;
    }
    return this.#sampled + this.#since;
  }

  /** A refusal when admitting one more connection would eat into the reserve. */
  check(source: string): ZmeshError | undefined {
    if (!Number.isFinite(this.limit)) return undefined;
    const open = this.open;
    if (open + this.reserve < this.limit) {
      this.#since++;
      return undefined;
    }
    return new ZmeshError('ZM_ERR_FD_RESERVE', { source, open, limit: this.limit, reserve: this.reserve });
  }
}
