import type { PathKind } from './peer-paths.js';

/** One number of one run: the JSON's `results[]` row. */
export interface BenchResult {
  path: string;
  workload: string;
  metric: string;
  value: number;
  unit: string;
}

/**
 * One Node runtime the bench's ztunnel pair runs on (`zmesh bench --runtimes`, runtimes.ts): the same
 * build, started by bin/zmesh with `ZMESH_NODE` (and `ZMESH_NODE_FLAGS` for extra V8 flags,
 * which come after bin/zmesh's own, so a repeated flag overrides its tuned value).
 */
export interface Runtime {
  /** The item as given: `node20`, `node24 --max-semi-space-size=8`, `/opt/node/bin/node`. */
  spec: string;
  node: string;
  /** `process.version` of `node`. */
  version: string;
  flags: string[];
}

export interface BenchReport {
  results: BenchResult[];
  /**
   * Each measured path and its kind, so readers can tell the C mTLS peers apart, and the
   * path its "vs direct" ratios are taken against when that is not `direct`.
   */
  paths: { name: string; kind: PathKind; direct?: string; l7Hop?: boolean }[];
  run: {
    date: string;
    quick: boolean;
    cpus: number;
    node: string;
    kernel: string;
    pinning: string;
    /** The `--baseline` build's git revision (its "before" paths), when there is one. */
    baseline?: string;
    /** `--runtimes`: the Node runtimes the ztunnel pair ran on, the first the reference. */
    runtimes?: Runtime[];
  };
}

/** Rates (`…/s`) are better higher; times, memory and CPU are better lower. */
function higherIsBetter(unit: string): boolean {
  return unit.endsWith('/s');
}

/** Metrics measured against the direct path: "added" values have no meaningful ratio to direct. */
function isAdded(metric: string): boolean {
  return metric.startsWith('added');
}

export interface Ratios {
  direct?: number;
  bestC?: number;
  /** Name of the best C mTLS peer for this row. */
  bestCPath?: string;
  /** To the `node:tls` pipe pair of the same setting: how far above Node's own cost. */
  nodeTls?: number;
}

/** Ratio of `r` to direct and to the best C mTLS peer of the same workload and metric. */
export function ratiosOf(report: BenchReport, r: BenchResult): Ratios {
  const same = report.results.filter((o) => o.workload === r.workload && o.metric === r.metric);
  const self = report.paths.find((p) => p.name === r.path);
  const directName = self?.direct ?? 'direct';
  // Peers are compared within their setting (loopback with loopback, cluster with cluster)
  // and their shape (pairs with pairs, paths with an L7 hop with those).
  const alike = (p: BenchReport['paths'][number]) =>
    (p.direct ?? 'direct') === directName && Boolean(p.l7Hop) === Boolean(self?.l7Hop);
  const cPeers = new Set(report.paths.filter((p) => p.kind === 'c-mtls' && alike(p)).map((p) => p.name));
  const nodeTlsPath = report.paths.find((p) => p.kind === 'node-tls' && alike(p));
  const nodeTls =
    r.path === nodeTlsPath?.name ? undefined : same.find((o) => o.path === nodeTlsPath?.name)?.value;
  const direct = r.path === directName ? undefined : same.find((o) => o.path === directName)?.value;
  const peers = same.filter((o) => cPeers.has(o.path));
  const best = peers.sort((a, b) => (higherIsBetter(r.unit) ? b.value - a.value : a.value - b.value))[0];
  const out: Ratios = {};
  if (direct !== undefined && direct > 0 && !isAdded(r.metric)) out.direct = r.value / direct;
  if (best && best.value > 0) {
    out.bestC = r.value / best.value;
    out.bestCPath = best.path;
  }
  if (nodeTls !== undefined && nodeTls > 0) out.nodeTls = r.value / nodeTls;
  return out;
}

export function find(
  report: BenchReport,
  path: string,
  workload: string,
  metric: string,
): number | undefined {
  return report.results.find((r) => r.path === path && r.workload === workload && r.metric === metric)?.value;
}

/** Formats a value with precision that suits its size. */
export function fmt(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return '-';
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  return v.toFixed(3);
}

export function fmtRatio(v: number | undefined): string {
  return v === undefined || !Number.isFinite(v) ? '-' : `${v.toFixed(2)}×`;
}

/** The plain-text table `zmesh bench` prints: one line per (workload, metric, path). */
export function textTable(report: BenchReport): string {
  const rows: string[][] = [
    ['workload', 'metric', 'path', 'value', 'vs direct', 'vs best C mTLS', 'vs node:tls pipe'],
  ];
  for (const r of report.results) {
    const q = ratiosOf(report, r);
    rows.push([
      r.workload,
      r.metric,
      r.path,
      `${fmt(r.value)} ${r.unit}`,
      fmtRatio(q.direct),
      fmtRatio(q.bestC),
      fmtRatio(q.nodeTls),
    ]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) =>
      row
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** Results sorted by workload then metric, paths in run order: what tables and charts show. */
export function ordered(report: BenchReport): BenchResult[] {
  const keys = [...new Set(report.results.map((r) => `${r.workload}\u0000${r.metric}`))];
  return keys.flatMap((k) => report.results.filter((r) => `${r.workload}\u0000${r.metric}` === k));
}
