import { writeFile } from 'node:fs/promises';

export interface SoakCommandOptions {
  minutes?: string;
  seconds?: string;
  json?: string;
  restartEveryMinutes?: string;
  restartSignal?: string;
}

const SIGNALS = { term: 'SIGTERM', kill: 'SIGKILL', alternate: 'alternate' } as const;

/**
 * `zmesh harness soak`: a ztunnel pair on loopback under good traffic and hostile peers for
 * N minutes while the control plane is killed and restarted every K minutes; exit 0 only if
 * no resource of a proxy grows (nor of the control plane within one incarnation), they stay
 * alive and reconnect, and no good request fails.
 */
export async function runSoakCommand(opts: SoakCommandOptions): Promise<number> {
  const seconds = opts.seconds !== undefined ? Number(opts.seconds) : Number(opts.minutes ?? '5') * 60;
  if (!Number.isFinite(seconds) || seconds < 10 || seconds > 24 * 3600) {
    console.error('zmesh harness soak: --minutes/--seconds must give between 10 s and 24 h');
    return 2;
  }
  const restartEvery = Number(opts.restartEveryMinutes ?? '3') * 60;
  if (!Number.isFinite(restartEvery) || restartEvery < 10) {
    console.error('zmesh harness soak: --restart-every-minutes must give at least 10 s');
    return 2;
  }
  const signal = SIGNALS[(opts.restartSignal ?? 'alternate') as keyof typeof SIGNALS];
  if (signal === undefined) {
    console.error('zmesh harness soak: --restart-signal must be term, kill or alternate');
    return 2;
  }
  // The soak's modules load only for flags that passed.
  const [{ runSoak }, { soakTable }] = await Promise.all([
    import('../soak/soak.js'),
    import('../soak/report.js'),
  ]);
  const report = await runSoak({
    seconds,
    sampleMs: seconds < 120 ? 1000 : 5000,
    restartEverySeconds: restartEvery,
    restartSignal: signal,
    echo: (line) => console.log(line),
  });
  console.log(soakTable(report));
  if (opts.json) {
    await writeFile(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`wrote ${opts.json}`);
  }
  return report.passed ? 0 : 1;
}
