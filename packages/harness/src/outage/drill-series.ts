import type { DrillRecorder, DrillReport } from './drill-report.js';
import type { MetricsScraper } from './metrics-scraper.js';
import type { TrafficLog } from './steady-traffic.js';

/** The chart's data: per 500 ms bucket the client's outcomes; per scrape, expiry and xDS state per node. */
export function drillSeries(
  rec: DrillRecorder,
  client: TrafficLog,
  scraper: MetricsScraper,
): DrillReport['series'] {
  const out: DrillReport['series'] = [];
  const bucket = (t: number) => Math.floor(rec.at(t) * 2) / 2;
  const counts = new Map<string, number>();
  for (const e of client.events.filter((x) => x.k === 'new')) {
    const key = `${bucket(e.t)}|${e.ok ? 'new connections ok' : 'new connections refused'}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  for (const [key, value] of counts) {
    const [t, series] = key.split('|');
    out.push({ t: Number(t), panel: 'client -> server (per 0.5 s)', series: series!, value });
  }
  for (const s of scraper.scrapes) {
    const t = rec.at(s.t);
    const left = s.values.zmesh_cert_seconds_to_earliest_expiry;
    if (left !== undefined)
      out.push({ t, panel: 'seconds to earliest cert expiry', series: s.node, value: left });
    const connected = s.values.zmesh_xds_connected;
    if (connected !== undefined) out.push({ t, panel: 'xDS connected', series: s.node, value: connected });
  }
  return out;
}
