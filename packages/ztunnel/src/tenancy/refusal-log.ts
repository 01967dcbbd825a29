import { type Logger, logger } from '@zmesh/shared';

/** Minimum time between two log lines for the same tenant and reason. */
export const DEFAULT_REFUSAL_LOG_INTERVAL_MS = 10_000;

interface Entry {
  lastAt: number;
  suppressed: number;
}

/**
 * Logs refusals at most once per interval per (tenant, kind), with the number suppressed
 * in between: a tenant hammering its quota must not turn into a log storm. Entries are
 * bounded by tenants × kinds, both bounded sets.
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

  /** Returns whether a line was written (for tests). */
  refused(tenant: string, kind: string, fields: Record<string, unknown>, message: string): boolean {
    const key = `${tenant}\u0000${kind}`;
    const at = this.now();
    const entry = this.#entries.get(key);
    if (entry && at - entry.lastAt < this.intervalMs) {
      entry.suppressed++;
      return false;
    }
    this.#log.warn({ tenant, kind, ...fields, suppressed: entry?.suppressed ?? 0 }, message);
    this.#entries.set(key, { lastAt: at, suppressed: 0 });
    return true;
  }
}
