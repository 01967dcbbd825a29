/** One verdict of the drill, with what was observed. */
export interface DrillCheck {
  name: string;
  passed: boolean;
  evidence: string;
}

/** One line of the story: when (seconds since the drill's traffic began), what, and how it went. */
export interface TimelineEntry {
  t: number;
  event: string;
  outcome: string;
}

export interface DrillReport {
  checks: DrillCheck[];
  timeline: TimelineEntry[];
  /** Series for the chart: per bucket, per series name. */
  series: Array<{ t: number; panel: string; series: string; value: number }>;
  marks: Array<{ t: number; label: string }>;
}

/** Collects the timeline and the checks as a drill runs. */
export class DrillRecorder {
  readonly checks: DrillCheck[] = [];
  readonly timeline: TimelineEntry[] = [];

  constructor(
    readonly t0: number,
    private readonly echo: (line: string) => void = () => {},
  ) {}

  /** Seconds since t0 of a wall-clock time, to a tenth. */
  at(wallMs: number): number {
    return Math.round((wallMs - this.t0) / 100) / 10;
  }

  note(event: string, outcome: string, wallMs = Date.now()): void {
    const entry = { t: this.at(wallMs), event, outcome };
    this.timeline.push(entry);
    this.echo(`  t=${entry.t.toFixed(1)}s  ${event}: ${outcome}`);
  }

  check(name: string, passed: boolean, evidence: string): boolean {
    this.checks.push({ name, passed, evidence });
    this.echo(`  ${passed ? 'PASS' : 'FAIL'}  ${name}: ${evidence}`);
    return passed;
  }

  get passed(): boolean {
    return this.checks.length > 0 && this.checks.every((c) => c.passed);
  }
}

/** The timeline as a fixed-width table, in time order. */
export function timelineTable(timeline: readonly TimelineEntry[]): string {
  const rows = [...timeline].sort((a, b) => a.t - b.t);
  const eventWidth = Math.min(60, Math.max(5, ...rows.map((r) => r.event.length)));
  const header = `${'t (s)'.padStart(7)}  ${'event'.padEnd(eventWidth)}  outcome`;
  const lines = rows.map((r) => `${r.t.toFixed(1).padStart(7)}  ${r.event.padEnd(eventWidth)}  ${r.outcome}`);
  return [header, '-'.repeat(header.length + 20), ...lines].join('\n');
}

export function checksTable(checks: readonly DrillCheck[]): string {
  return checks.map((c) => `${c.passed ? 'PASS' : 'FAIL'}  ${c.name}\n        ${c.evidence}`).join('\n');
}

export function verdictLine(checks: readonly DrillCheck[]): string {
  const failed = checks.filter((c) => !c.passed);
  return failed.length === 0 && checks.length > 0
    ? `VERDICT: PASS (${checks.length}/${checks.length} checks): the mesh rode out the control-plane outage`
    : `VERDICT: FAIL (${failed.length} of ${checks.length} checks failed: ${failed.map((c) => c.name).join('; ')})`;
}
