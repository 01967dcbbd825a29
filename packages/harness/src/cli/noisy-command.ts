import { writeFile } from 'node:fs/promises';
import { BpfCapture } from '@zmesh/ztunnel';
import {
  runNoisyNeighbor,
  SCENARIOS,
  type Scenario,
  type ScenarioResult,
  type SoloRuns,
} from '../noisy/noisy-neighbor.js';
import { chart, table, verdictOf } from '../noisy/noisy-report.js';

export interface NoisyCommandOptions {
  json?: string;
  png?: string;
  quick?: boolean;
  scenarios?: string;
  fairness?: string;
  rounds?: string;
  /** One `--workers` value or a list (`1,2`): each setting is measured in turn, in one run. */
  workers?: string;
}

/** `zmesh harness noisy-neighbor`: prints progress, the table, and the verdict last; exit 1 if it failed. */
export async function runNoisyCommand(opts: NoisyCommandOptions): Promise<number> {
  const why = await BpfCapture.unavailableReason();
  if (why) {
    console.error(`noisy-neighbor needs the local cluster (root and BPF): ${why}`);
    return 2;
  }
  const picked = opts.scenarios?.split(',').map((s) => s.trim());
  const bad = picked?.filter((s) => !(SCENARIOS as readonly string[]).includes(s)) ?? [];
  const fairness = opts.fairness === undefined || opts.fairness === 'both' ? undefined : [opts.fairness];
  if (bad.length > 0 || fairness?.some((f) => f !== 'on' && f !== 'off')) {
    console.error(
      `noisy-neighbor: --scenarios takes ${SCENARIOS.join(',')} and --fairness on|off|both (got ${[...bad, opts.fairness].join(', ')})`,
    );
    return 2;
  }
  const rounds = opts.rounds === undefined ? undefined : Number(opts.rounds);
  if (rounds !== undefined && !(Number.isInteger(rounds) && rounds >= 1 && rounds <= 20)) {
    console.error(`noisy-neighbor: --rounds takes a whole number from 1 to 20 (got ${opts.rounds})`);
    return 2;
  }
  const workers = (opts.workers ?? '1').split(',').map((w) => Number(w.trim()));
  if (!workers.every((w) => Number.isInteger(w) && w >= 1 && w <= 16)) {
    console.error(
      `noisy-neighbor: --workers takes whole numbers from 1 to 16, comma-separated (got ${opts.workers})`,
    );
    return 2;
  }
  const started = Date.now();
  const scenarios: ScenarioResult[] = [];
  const runs: { workers: number; capacityRps: number; solo: SoloRuns }[] = [];
  for (const w of workers) {
    const run = await runNoisyNeighbor({
      quick: opts.quick === true,
      workers: w,
      ...(rounds ? { rounds } : {}),
      ...(picked ? { scenarios: picked as Scenario[] } : {}),
      ...(fairness ? { fairness: fairness as ('on' | 'off')[] } : {}),
      progress: (line) =>
        console.log(
          `[${((Date.now() - started) / 1000).toFixed(0)}s]${workers.length > 1 ? ` ${w} workers:` : ''} ${line}`,
        ),
    });
    scenarios.push(...run.scenarios);
    runs.push({ workers: w, capacityRps: run.capacityRps, solo: run.solo });
  }
  const verdict = verdictOf(scenarios);
  console.log(`\n${table(scenarios)}\n`);
  // One setting keeps the JSON's old shape (capacityRps and solo at the top); several add `runs`.
  const { capacityRps, solo } = runs[0]!;
  if (opts.json)
    await writeFile(
      opts.json,
      `${JSON.stringify({ capacityRps, solo, ...(runs.length > 1 ? { runs } : {}), scenarios, verdict }, null, 2)}\n`,
    );
  if (opts.png) await writeFile(opts.png, await chart(scenarios));
  console.log(verdict.passed ? 'verdict: PASSED' : `verdict: FAILED\n  ${verdict.reasons.join('\n  ')}`);
  return verdict.passed ? 0 : 1;
}
