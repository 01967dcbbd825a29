import { type Logger, logger } from '@zmesh/shared';

/** Minimum time between two log lines for the same subject and reason. */
export const DEFAULT_REFUSAL_LOG_INTERVAL_MS = 10_000;

/** Past this many entries, those quiet for a whole interval are dropped when a line is written. */
const PRUNE_ABOVE_ENTRIES = 1024;

interface Entry {
  lastAt: number;
  suppressed: number;
}

/**
 * Logs refusals at most once per interval per (subject, kind), with the number suppressed
 * in between: a tenant hammering its quota, or a pod storming connects, must not turn into
 * a log storm (the metrics count every refusal). The subject is a tenant or a workload;
 * workloads come and go, so entries quiet for a whole interval are pruned once there are
 * many: what is kept is bounded by the subjects refused within one interval.
 */
export class RefusalLog {
  readonly #entries = new Map<string, Entry>();
  readonly #log: Logger;

  constructor(
    readonly intervalMs = DEFAULT_REFUSAL_LOG_INTERVAL_MS,
    readonly now: () => number = () => performance.now(),
    log: Logger = logger('tenancy'),
  ) {
    this.#log = log;
  }

  /**
   * `fields` make the log line, with `suppressed` (refusals of this subject and kind not
   * logged since its last line) added. Returns whether a line was written (for tests).
   */
  refused(subject: string, kind: string, fields: Record<string, unknown>, message: string): boolean {
    const key = `${subject}\u0000${kind}`;
    const at = this.now();
    const entry = this.#entries.get(key);
    if (entry && at - entry.lastAt < this.intervalMs) {
      entry.suppressed++;
      return false;
    }
    this.#log.warn({ ...fields, suppressed: entry?.suppressed ?? 0 }, message);
    if (entry) {
      entry.lastAt = at;
      entry.suppressed = 0;
    } else {
      if (this.#entries.size >= PRUNE_ABOVE_ENTRIES) this.#prune(at);
      this.#entries.set(key, { lastAt: at, suppressed: 0 });
    }
    return true;
  }

  /** Entries kept (for tests). */
  get size(): number {
    return this.#entries.size;
  }

  #prune(at: number): void {
    for (const [key, e] of this.#entries) if (at - e.lastAt >= this.intervalMs) this.#entries.delete(key);
  }
}
