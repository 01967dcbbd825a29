import { existsSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { execa } from 'execa';

/** The shipped alert rules and their promtool unit tests. */
export const ALERT_RULES_FILE = resolve(
  import.meta.dirname,
  '../../../../deploy/prometheus/zmesh-alerts.yaml',
);
export const ALERT_TESTS_FILE = resolve(
  import.meta.dirname,
  '../../../../deploy/prometheus/zmesh-alerts.test.yaml',
);
/** promtool evaluating a few hundred samples takes well under a second; this bounds a hang. */
const PROMTOOL_TIMEOUT_MS = 30_000;

/** promtool on PATH (Debian's `prometheus` package ships it), or undefined. */
export function promtoolPath(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir, 'promtool');
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** `promtool test rules FILE`: passed, and promtool's own words either way. */
export async function promtoolTestRules(file: string): Promise<{ passed: boolean; output: string }> {
  const promtool = promtoolPath();
  if (!promtool) return { passed: false, output: 'promtool not found on PATH' };
  const r = await execa(promtool, ['test', 'rules', file], { reject: false, timeout: PROMTOOL_TIMEOUT_MS });
  return { passed: r.exitCode === 0, output: `${r.stdout}\n${r.stderr}`.trim() };
}
