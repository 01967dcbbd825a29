/** Bound on kept log lines across all nodes; older lines are dropped first. */
const MAX_LOG_LINES = 4000;

export interface LogLine {
  node: string;
  seq: number;
  record: Record<string, unknown>;
}

/** Messages that say what an enforcement point decided; the rest is not evidence. */
const DECISIONS = new Set([
  'tunnel refused',
  'peer refused',
  'handshake refused',
  'captured connection refused',
  'connection refused',
  // The access log's line per closed or refused connection (batched: it may trail by ~1 s).
  'connection',
]);

/**
 * The ztunnels' structured (pino JSON) stderr, kept in a bounded ring so an attempt can
 * cite the log lines its traffic caused.
 */
export class ZtunnelLogs {
  private lines: LogLine[] = [];
  private partial = new Map<string, string>();
  private seq = 0;
  private markSeq = 0;

  add(node: string, chunk: string): void {
    const text = (this.partial.get(node) ?? '') + chunk;
    const parts = text.split('\n');
    this.partial.set(node, parts.pop() ?? '');
    for (const part of parts) {
      if (part.trim() === '') continue;
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(part) as Record<string, unknown>;
      } catch {
        record = { msg: part };
      }
      this.lines.push({ node, seq: ++this.seq, record });
    }
    if (this.lines.length > MAX_LOG_LINES) this.lines = this.lines.slice(-MAX_LOG_LINES);
  }

  mark(): void {
    this.markSeq = this.seq;
  }

  /** Decision lines logged since the last mark. */
  decisions(): LogLine[] {
    return this.lines.filter((l) => l.seq > this.markSeq && DECISIONS.has(String(l.record.msg)));
  }

  /** Every line since the last mark (e.g. to show why a ztunnel failed). */
  sinceMark(): LogLine[] {
    return this.lines.filter((l) => l.seq > this.markSeq);
  }
}

/** One line of evidence: node, scope, message and the fields that say who and why. */
export function describeLogLine(l: LogLine): string {
  const r = l.record;
  const fields = [
    'src',
    'dst',
    'peer',
    'pod',
    'code',
    'reason',
    'err',
    'flag',
    'src_identity',
    'dst_address',
    'result',
    'error_code',
  ]
    .filter((k) => r[k] !== undefined)
    .map((k) => `${k}=${String(r[k]).slice(0, 90)}`);
  return `log ${l.node} ${String(r.scope ?? '?')}: "${String(r.msg)}" ${fields.join(' ')}`.trim();
}
