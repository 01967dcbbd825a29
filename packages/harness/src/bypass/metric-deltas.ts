/**
 * Counter movements between two Prometheus scrapes: the evidence of which enforcement
 * point saw an attempt. Only zmesh and Istio TCP series count; process and runtime series
 * move on their own.
 */
export type Scrape = Map<string, number>;

/** Series whose movement says something about the data path. */
const RELEVANT = /^(zmesh_|istio_tcp_)/;
/**
 * Gauges of open things (they go up and come back) and of time (they move by themselves):
 * neither says anything about one attempt.
 */
const IGNORED =
  /^(zmesh_hbone_inbound_(sessions|streams)|zmesh_hbone_sessions|zmesh_pods_enrolled|zmesh_capture_pods)\b|^[a-z_]*_seconds/;
/** Series that name an enforcement decision come first in evidence. */
const DECISIVE = [
  'zmesh_capture_inbound_drops',
  'zmesh_authz_decisions_total',
  'zmesh_hbone_handshake_failures_total',
  'zmesh_capture_refused_total',
  'zmesh_capture_original_dst_misses_total',
  'zmesh_errors_total',
  'istio_tcp_connections_opened_total',
];
/** Labels worth printing; the rest of Istio's label set is noise in a one-line summary. */
const SHOWN_LABELS = new Set([
  'reporter',
  'source_principal',
  'destination_workload',
  'response_flags',
  'code',
  'flag',
  'reason',
  'pod',
  'decision',
  'state',
]);

export function parseScrape(text: string): Scrape {
  const out: Scrape = new Map();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const cut = line.lastIndexOf(' ');
    const series = line.slice(0, cut);
    const value = Number(line.slice(cut + 1));
    if (RELEVANT.test(series) && !IGNORED.test(series) && Number.isFinite(value)) out.set(series, value);
  }
  return out;
}

export interface Movement {
  node: string;
  series: string;
  delta: number;
}

/**
 * Series that changed (or appeared) from `before` to `after`, largest first. A counter
 * that went down was reset (its ztunnel restarted): all of its value is new.
 */
export function movements(node: string, before: Scrape, after: Scrape): Movement[] {
  const out: Movement[] = [];
  for (const [series, value] of after) {
    const prev = before.get(series) ?? 0;
    const delta = value < prev ? value : value - prev;
    if (delta !== 0) out.push({ node, series, delta });
  }
  const rank = (m: Movement) => {
    const i = DECISIVE.findIndex((n) => m.series === n || m.series.startsWith(`${n}{`));
    return i === -1 ? DECISIVE.length : i;
  };
  return out.sort((a, b) => rank(a) - rank(b) || Math.abs(b.delta) - Math.abs(a.delta));
}

/** Sum of deltas of series named `name` whose labels contain every `labels` fragment. */
export function moved(list: readonly Movement[], name: string, ...labels: string[]): number {
  return list
    .filter(
      (m) =>
        (m.series === name || m.series.startsWith(`${name}{`)) && labels.every((l) => m.series.includes(l)),
    )
    .reduce((n, m) => n + m.delta, 0);
}

export function describeMovement(m: Movement): string {
  const brace = m.series.indexOf('{');
  const name = brace === -1 ? m.series : m.series.slice(0, brace);
  const labels = brace === -1 ? [] : [...m.series.slice(brace).matchAll(/([a-z_]+)="([^"]*)"/g)];
  const shown = labels.filter(([, k]) => SHOWN_LABELS.has(k!)).map(([, k, v]) => `${k}="${v}"`);
  return `${m.node} ${name}${shown.length ? `{${shown.join(',')}}` : ''} ${m.delta > 0 ? '+' : ''}${m.delta}`;
}
