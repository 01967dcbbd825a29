import type { AttemptReport, BypassReport } from './attempt.js';

/** Evidence lines shown per attempt in the table; the JSON has all of them. */
const TABLE_EVIDENCE_LINES = 5;

/** The human table: attempt, expected, observed, verdict, then its evidence indented. */
export function formatTable(report: BypassReport): string {
  const width = Math.max(...report.attempts.map((a) => a.id.length), 7);
  const head = `${'attempt'.padEnd(width)}  ${'expected'.padEnd(9)} ${'observed'.padEnd(9)} verdict`;
  const rows = report.attempts.map((a) => formatRow(a, width));
  const s = report.summary;
  const foot = `${s.total} attempts: ${s.bypassed} delivered (bypass), ${s.errors} not executed, ${s.failed} not as expected`;
  return [head, '-'.repeat(head.length + 4), ...rows, '', foot].join('\n');
}

function formatRow(a: AttemptReport, width: number): string {
  const verdict =
    a.observed === 'delivered' ? 'BYPASS' : a.observed === 'error' ? 'ERROR' : a.passed ? 'ok' : 'UNEXPECTED';
  const lines = [`${a.id.padEnd(width)}  ${a.expected.padEnd(9)} ${a.observed.padEnd(9)} ${verdict}`];
  lines.push(`${' '.repeat(4)}${a.description}`);
  for (const e of a.evidence.slice(0, TABLE_EVIDENCE_LINES)) lines.push(`${' '.repeat(6)}- ${e}`);
  if (a.evidence.length > TABLE_EVIDENCE_LINES)
    lines.push(`${' '.repeat(6)}  (+${a.evidence.length - TABLE_EVIDENCE_LINES} more in --json)`);
  return lines.join('\n');
}
