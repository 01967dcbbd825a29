import { dirname, resolve } from 'node:path';
import { execa } from 'execa';
import { ZMESH_BIN } from '../local/ztunnel-process.js';
import { markdownTable } from '../report/perf-markdown.js';
import { type BenchReport, fmt, fmtRatio, type Runtime } from './bench-results.js';

/** The checkout's own Node (scripts/bootstrap.sh), then the machine's. */
const CANDIDATES = [
  resolve(dirname(ZMESH_BIN), '../.tools/node/bin/node'),
  '/usr/bin/node',
  '/usr/local/bin/node',
];

/**
 * `--runtimes` items, comma-separated: a Node (`nodeNN`, found among the checkout's and the
 * machine's by major version, or a path to a node binary), then any extra node flags. The
 * first is the reference the others are divided by. Errors name the item.
 */
export async function resolveRuntimes(list: string): Promise<Runtime[]> {
  const items = list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length === 0) throw new Error('--runtimes: no runtime given');
  const out: Runtime[] = [];
  for (const spec of items) {
    if (out.some((r) => r.spec === spec)) throw new Error(`--runtimes: ${spec} given twice`);
    const [name, ...flags] = spec.split(/\s+/);
    const bad = flags.find((f) => !f.startsWith('--'));
    if (bad) throw new Error(`--runtimes: ${spec}: ${bad} is not a node flag (--…)`);
    const found = await findNode(name!);
    if (!found) throw new Error(`--runtimes: ${spec}: ${nodeNotFound(name!)}`);
    out.push({ spec, ...found, flags });
  }
  return out;
}

function nodeNotFound(name: string): string {
  return name.includes('/')
    ? `${name} is not a runnable node`
    : /^node\d+$/.test(name)
      ? `no Node ${name.slice(4)} among ${CANDIDATES.join(', ')} (give its path instead)`
      : `${name} is neither nodeNN nor a path to a node binary`;
}

async function findNode(name: string): Promise<{ node: string; version: string } | undefined> {
  if (name.includes('/')) {
    const version = await versionOf(resolve(name));
    return version ? { node: resolve(name), version } : undefined;
  }
  const major = /^node(\d+)$/.exec(name)?.[1];
  if (!major) return undefined;
  for (const node of CANDIDATES) {
    const version = await versionOf(node);
    if (version?.startsWith(`v${major}.`)) return { node, version };
  }
  return undefined;
}

async function versionOf(node: string): Promise<string | undefined> {
  const r = await execa(node, ['--version'], { reject: false, timeout: 10_000 });
  return r.exitCode === 0 && /^v\d+\./.test(r.stdout) ? r.stdout.trim() : undefined;
}

/** The bench path's name for the ztunnel pair on `r`. */
export function runtimePathName(base: string, r: Runtime): string {
  return `${base} (node ${r.version}${r.flags.length ? ` ${r.flags.join(' ')}` : ''})`;
}

/** bin/zmesh's environment for `r`: its node, and its flags after any the caller set. */
export function runtimeEnv(r: Runtime): Record<string, string> {
  const flags = [process.env.ZMESH_NODE_FLAGS, ...r.flags].filter(Boolean).join(' ');
  return { ZMESH_NODE: r.node, ...(flags ? { ZMESH_NODE_FLAGS: flags } : {}) };
}

/**
 * A markdown table (for docs/performance.md as it is) with one line per (workload, metric): each runtime's value, and each one after the first
 * divided by the first (`node24 ÷ node20` for `--runtimes node20,node24`).
 */
export function runtimeTable(report: BenchReport, base: string, runtimes: Runtime[]): string {
  const names = runtimes.map((r) => runtimePathName(base, r));
  const first = runtimes[0]!.spec;
  const head = [
    'workload',
    'metric',
    ...runtimes.map((r) => r.spec),
    ...runtimes.slice(1).map((r) => `${r.spec} ÷ ${first}`),
  ];
  const rows: string[][] = [];
  const keys = [...new Set(report.results.map((r) => `${r.workload}\u0000${r.metric}`))];
  for (const key of keys) {
    const [workload, metric] = key.split('\u0000') as [string, string];
    const same = report.results.filter((r) => r.workload === workload && r.metric === metric);
    const values = names.map((n) => same.find((r) => r.path === n)?.value);
    const unit = same[0]?.unit ?? '';
    const ratio = (v: number | undefined) =>
      v === undefined || values[0] === undefined || values[0] === 0 ? undefined : v / values[0];
    rows.push([
      workload,
      `${metric} (${unit})`,
      ...values.map(fmt),
      ...values.slice(1).map((v) => fmtRatio(ratio(v))),
    ]);
  }
  return markdownTable(head, rows).join('\n');
}
