/** The outage metrics the drill reads and its alert rules use (docs/design.md §8, §9). */
const OUTAGE_METRICS = [
  'zmesh_xds_connected',
  'zmesh_xds_disconnected_seconds',
  'zmesh_xds_snapshot_age_seconds',
  'zmesh_xds_nacks_total',
  'zmesh_cert_seconds_to_earliest_expiry',
  'zmesh_cert_earliest_lifetime_seconds',
] as const;
export type OutageMetric = (typeof OUTAGE_METRICS)[number];

export interface Scrape {
  /** Wall-clock ms. */
  t: number;
  node: string;
  /** Missing while the proxy is down (restart); labelled series are summed. */
  values: Partial<Record<OutageMetric, number>>;
}

/** Drill samples at most this many scrapes per node (a CI drill takes ~100). */
const MAX_SCRAPES_PER_NODE = 2000;

/** Parses the Prometheus text format for the outage metrics only. */
export function parseOutageMetrics(text: string): Partial<Record<OutageMetric, number>> {
  const out: Partial<Record<OutageMetric, number>> = {};
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const name = line.split(/[{ ]/, 1)[0] as OutageMetric;
    if (!OUTAGE_METRICS.includes(name)) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) out[name] = (out[name] ?? 0) + value;
  }
  return out;
}

/**
 * Scrapes every node's /metrics on an interval (like Prometheus would), keeping a bounded
 * series per node. A proxy that does not answer yields a scrape with no values.
 */
export class MetricsScraper {
  readonly scrapes: Scrape[] = [];
  #timer: NodeJS.Timeout | undefined;
  #busy = false;

  constructor(
    private readonly nodes: readonly string[],
    private readonly fetchMetrics: (node: string) => Promise<string>,
    private readonly everyMs: number,
  ) {}

  start(): void {
    this.#timer = setInterval(() => void this.scrapeOnce(), this.everyMs);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async scrapeOnce(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      const t = Date.now();
      const rows = await Promise.all(
        this.nodes.map(async (node) => {
          const text = await this.fetchMetrics(node).catch(() => '');
          return { t, node, values: parseOutageMetrics(text) };
        }),
      );
      if (this.scrapes.length < MAX_SCRAPES_PER_NODE * this.nodes.length) this.scrapes.push(...rows);
    } finally {
      this.#busy = false;
    }
  }

  of(node: string): Scrape[] {
    return this.scrapes.filter((s) => s.node === node);
  }

  /** The latest scrape of `node` with a value for `metric`, at or before `t`. */
  latest(node: string, metric: OutageMetric, t = Date.now()): number | undefined {
    const rows = this.of(node).filter((s) => s.t <= t && s.values[metric] !== undefined);
    return rows.at(-1)?.values[metric];
  }
}
