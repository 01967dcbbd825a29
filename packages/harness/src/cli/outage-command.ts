import { writeFile } from 'node:fs/promises';
import { BpfCapture } from '@zmesh/ztunnel';
import { checksTable, timelineTable, verdictLine } from '../outage/drill-report.js';
import { DEFAULT_DRILL_CERT_TTL_SECONDS, runOutageDrill } from '../outage/outage-drill.js';
import { outageChartPng } from '../outage/timeline-chart.js';

export interface OutageCommandOptions {
  duration?: string;
  certTtl?: string;
  json?: string;
  png?: string;
}

/**
 * `zmesh harness outage`: the control-plane outage drill on the local cluster (root, BPF).
 * Prints the timeline and the checks, writes JSON and PNG if asked, and prints the verdict
 * last. Exit 0 only when every check passed.
 */
export async function runOutage(opts: OutageCommandOptions): Promise<number> {
  const why = await BpfCapture.unavailableReason();
  if (why) {
    console.error(`zmesh harness outage: needs the local cluster (root, BPF): ${why}`);
    return 2;
  }
  const certTtlSeconds = opts.certTtl ? Number(opts.certTtl) : undefined;
  const durationSeconds = opts.duration ? Number(opts.duration) : undefined;
  const usage = usageError(certTtlSeconds, durationSeconds);
  if (usage) {
    console.error(`zmesh harness outage: ${usage}`);
    return 2;
  }
  console.log('outage drill: control plane unreachable under steady traffic (time-compressed)');
  const report = await runOutageDrill({
    ...(certTtlSeconds ? { certTtlSeconds } : {}),
    ...(durationSeconds ? { durationSeconds } : {}),
    echo: (line) => console.log(line),
  });
  console.log(`\nTimeline\n${timelineTable(report.timeline)}\n\nChecks\n${checksTable(report.checks)}\n`);
  if (opts.json) {
    await writeFile(
      opts.json,
      `${JSON.stringify({ checks: report.checks, timeline: report.timeline }, null, 2)}\n`,
    );
    console.log(`wrote ${opts.json}`);
  }
  if (opts.png) {
    await writeFile(opts.png, await outageChartPng(report, 'zmesh control-plane outage drill'));
    console.log(`wrote ${opts.png}`);
  }
  console.log(verdictLine(report.checks));
  return report.checks.every((c) => c.passed) ? 0 : 1;
}

/**
 * The phases before expiry (serve, new pod, config change, two restarts) take ~8 s after the
 * cut, and certificates expire between half and all of their lifetime after it.
 */
const MIN_DRILL_CERT_TTL_SECONDS = 14;

function usageError(ttl?: number, duration?: number): string | undefined {
  if (ttl !== undefined && !(ttl >= MIN_DRILL_CERT_TTL_SECONDS))
    return `--cert-ttl must be at least ${MIN_DRILL_CERT_TTL_SECONDS} s (the phases before expiry need it)`;
  if (duration !== undefined && !(duration >= (ttl ?? DEFAULT_DRILL_CERT_TTL_SECONDS)))
    return '--duration must be at least --cert-ttl, or certificates cannot expire during the outage';
  return undefined;
}
