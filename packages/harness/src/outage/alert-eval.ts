import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { stringify } from 'yaml';
import type { OutageMetric, Scrape } from './metrics-scraper.js';
import { ALERT_RULES_FILE, promtoolPath } from './promtool.js';

/** One promtool evaluation per scrape; a drill has ~100, this bounds a runaway. */
const MAX_EVALUATED_SCRAPES = 1500;

export interface AlertFiring {
  /** Index of the first scrape at which the alert fires (undefined: never). */
  index?: number;
  /** Wall-clock ms of that scrape. */
  t?: number;
  /** promtool's output when it could not evaluate. */
  error?: string;
}

/**
 * When the shipped rule `alertname` first fires on one node's scraped series, as promtool
 * evaluates it. Time compression: scrape i becomes the sample at i minutes, so a rule's
 * `for: 1m` means "true on two consecutive scrapes"; the rules compare values relative to
 * each other (seconds left vs lifetime), so compressing time changes nothing else. Every
 * scrape is asked to show no alert; the failures promtool reports are exactly the
 * evaluation times at which the alert fired.
 */
export async function firstFiring(
  alertname: string,
  scrapes: readonly Scrape[],
  metrics: readonly OutageMetric[],
): Promise<AlertFiring> {
  const promtool = promtoolPath();
  if (!promtool) return { error: 'promtool not on PATH' };
  const rows = scrapes.slice(0, MAX_EVALUATED_SCRAPES);
  const instance = rows[0]?.node ?? 'node';
  const series = (m: OutageMetric) =>
    rows.map((s) => (s.values[m] === undefined ? '_' : String(s.values[m])));
  const test = {
    rule_files: [ALERT_RULES_FILE],
    evaluation_interval: '1m',
    tests: [
      {
        interval: '1m',
        input_series: metrics.map((m) => ({
          series: `${m}{instance="${instance}"}`,
          values: series(m).join(' '),
        })),
        alert_rule_test: rows.map((_s, i) => ({ eval_time: `${i}m`, alertname, exp_alerts: [] })),
      },
    ],
  };
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-alert-eval-'));
  try {
    const file = join(dir, 'eval.test.yaml');
    await writeFile(file, stringify(test));
    const r = await execa(promtool, ['test', 'rules', file], { reject: false, timeout: 60_000 });
    const output = `${r.stdout}\n${r.stderr}`;
    if (r.exitCode === 0) return {};
    // promtool prints eval times as Prometheus durations: 5m, 1h10m, 2h.
    const times = [
      ...output.matchAll(new RegExp(`alertname: ${alertname}, time: (?:(\\d+)h)?(?:(\\d+)m)?`, 'g')),
    ].map((m) => Number(m[1] ?? 0) * 60 + Number(m[2] ?? 0));
    if (times.length === 0) return { error: output.trim().slice(0, 2000) };
    const index = Math.min(...times);
    return { index, t: rows[index]!.t };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
