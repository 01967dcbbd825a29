import { writeFile } from 'node:fs/promises';
import { setLogLevel } from '@zmesh/shared';
import { BpfCapture } from '@zmesh/ztunnel';
import type { BypassReport } from '../bypass/attempt.js';
import { BypassLab } from '../bypass/bypass-lab.js';
import { runAttempts } from '../bypass/bypass-runner.js';
import { formatTable } from '../bypass/bypass-table.js';
import { catalogue } from '../bypass/catalogue.js';

export interface BypassOptions {
  json?: string;
  /** Only attempts whose id contains this text. */
  only?: string;
}

/**
 * `zmesh harness bypass`: brings up the local mesh, runs the bypass catalogue against it,
 * prints the table (and writes JSON). Exit 0 only when nothing was delivered, every
 * attempt ran, and each came out as expected; 2 when the mesh cannot be run here.
 */
export async function runBypass(opts: BypassOptions = {}): Promise<number> {
  const attempts = catalogue().filter((a) => !opts.only || a.id.includes(opts.only));
  // A run of no attempts proves nothing: say so rather than pass.
  if (attempts.length === 0) {
    console.error(`zmesh harness bypass: no attempt id contains "${opts.only}"`);
    return 2;
  }
  const unavailable = await BpfCapture.unavailableReason();
  if (unavailable) {
    console.error(`zmesh harness bypass: needs root and BPF: ${unavailable}`);
    return 2;
  }
  // The table is the output; the harness's own info logs (cluster up, cleanup) are noise here.
  if (!process.env.ZMESH_LOG) setLogLevel('*', 'warn');
  const lab = await BypassLab.up();
  let report: BypassReport;
  try {
    report = await runAttempts(lab, attempts, (r) =>
      process.stderr.write(
        `  ${r.observed === 'delivered' || !r.passed ? '!!' : 'ok'} ${r.id}: ${r.observed}\n`,
      ),
    );
  } finally {
    await lab.down();
  }
  console.log(formatTable(report));
  if (opts.json) await writeFile(opts.json, `${JSON.stringify(report, null, 2)}\n`);
  const s = report.summary;
  return s.bypassed > 0 || s.errors > 0 || s.failed > 0 ? 1 : 0;
}
