import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { BypassLab } from './bypass-lab.js';
import { runAttempts } from './bypass-runner.js';
import { formatTable } from './bypass-table.js';
import { catalogue } from './catalogue.js';
import { judgeProbes } from './judge.js';

/**
 * The whole bypass catalogue on a real local mesh (docs/design.md §1, security reviewer): nothing
 * may be delivered, every attempt must run and come out as its row expects, each with
 * evidence. Needs root and BPF; skipped (and said so) without them.
 */
const unavailable = await BpfCapture.unavailableReason();

(unavailable ? test.skip : test)(
  unavailable
    ? `bypass catalogue skipped: ${unavailable}`
    : 'the bypass catalogue: ≥ 25 attempts, none delivered, none unexecuted, each as expected with evidence',
  async (t) => {
    t.timeout(180_000);
    const lab = await BypassLab.up();
    try {
      // The detector itself: a pod outside the mesh (no strict inbound) is reachable, and both
      // witnesses must say so — a harness that cannot see a delivery proves nothing.
      const open = lab.pod('waypoint');
      await lab.mark();
      const [probe] = await lab.probe(lab.pod('outsider'), [{ host: open.ipv4, port: 8080 }]);
      t.is(judgeProbes([probe!], []).observed, 'delivered', JSON.stringify(probe));
      await new Promise((r) => setTimeout(r, 100));
      t.true(
        lab.witness.sinceMark().some((e) => lab.witness.cameAround(e)),
        'the target saw it come from outside',
      );
      const report = await runAttempts(lab, catalogue());
      t.log(formatTable(report));
      t.true(report.summary.total >= 25, `${report.summary.total} attempts`);
      t.is(report.summary.bypassed, 0, 'delivered');
      t.is(report.summary.errors, 0, 'not executed');
      for (const a of report.attempts) {
        t.true(
          a.passed,
          `${a.id}: expected ${a.expected}, observed ${a.observed}: ${a.evidence.join(' | ')}`,
        );
        t.true(a.evidence.length > 0, `${a.id} has evidence`);
      }
    } finally {
      await lab.down();
    }
  },
);
