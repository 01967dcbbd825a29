import { logger } from '@zmesh/shared';
import type { Attempt, AttemptReport, BypassReport, Observed, Outcome } from './attempt.js';
import type { BypassLab } from './bypass-lab.js';
import { describeMovement } from './metric-deltas.js';
import { describeTargetEvents } from './target-witness.js';
import { describeLogLine } from './ztunnel-logs.js';

const log = logger('bypass');

/** Bound on one attempt; one that runs over is an error, not a pass. */
export const ATTEMPT_TIMEOUT_MS = 30_000;
/** Evidence lines added from counters and logs, per attempt. */
const MAX_COUNTER_LINES = 6;
const MAX_LOG_EVIDENCE = 3;
/** Time for a target's stdout to reach us after the attempt ended. */
const WITNESS_SETTLE_MS = 50;

/**
 * Runs attempts one after another (each attempt's counters must be its own), adds the
 * counters that moved and the ztunnel log lines it caused to its evidence, and judges it:
 * passed when what was observed is what the row expects. An attempt that throws or
 * times out is an `error`.
 */
export async function runAttempts(
  lab: BypassLab,
  attempts: readonly Attempt[],
  onResult?: (r: AttemptReport) => void,
): Promise<BypassReport> {
  const results: AttemptReport[] = [];
  for (const a of attempts) {
    const r = await runOne(lab, a);
    results.push(r);
    onResult?.(r);
  }
  const summary = {
    total: results.length,
    bypassed: results.filter((r) => r.observed === 'delivered').length,
    errors: results.filter((r) => r.observed === 'error').length,
    failed: results.filter((r) => !r.passed).length,
  };
  return { attempts: results, summary };
}

async function runOne(lab: BypassLab, a: Attempt): Promise<AttemptReport> {
  let outcome: Outcome;
  try {
    await lab.mark();
    outcome = await withTimeout(a.run(lab), ATTEMPT_TIMEOUT_MS);
  } catch (e) {
    log.warn({ attempt: a.id, err: (e as Error).message }, 'attempt could not be executed');
    outcome = { observed: 'error', evidence: [`not executed: ${(e as Error).message}`] };
  }
  const witnessed = await targetsSaw(lab);
  const evidence = [...outcome.evidence, ...witnessed.evidence, ...(await meshEvidence(lab))];
  const observed = witnessed.around ? 'delivered' : outcome.observed;
  const accepted: Observed[] = [a.expected, ...(a.alsoAccepted ?? [])];
  return {
    id: a.id,
    description: a.description,
    expected: a.expected,
    observed,
    passed: accepted.includes(observed),
    evidence,
  };
}

/** The targets' own record; a TCP peer from outside the target's pod is a bypass, whatever the attempt said. */
async function targetsSaw(lab: BypassLab): Promise<{ evidence: string[]; around: boolean }> {
  // Let the targets' last lines arrive: they print before answering, the pipe may lag.
  await new Promise((r) => setTimeout(r, WITNESS_SETTLE_MS));
  const seen = lab.witness.sinceMark();
  const evidence = describeTargetEvents(lab.witness, seen);
  const around = seen.find((e) => lab.witness.cameAround(e));
  if (around) evidence.push(`BYPASS: ${around.target} accepted TCP from outside its pod (${around.peer})`);
  return { evidence, around: around !== undefined };
}

/** The counters that moved and the decision lines the ztunnels logged. */
async function meshEvidence(lab: BypassLab): Promise<string[]> {
  const out: string[] = [];
  try {
    const moved = await lab.moves();
    out.push(...moved.slice(0, MAX_COUNTER_LINES).map((m) => `counter ${describeMovement(m)}`));
    if (moved.length === 0) out.push('no mesh counter moved');
  } catch (e) {
    out.push(`counters unreadable: ${(e as Error).message}`);
  }
  out.push(...lab.logs.decisions().slice(0, MAX_LOG_EVIDENCE).map(describeLogLine));
  return out;
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
