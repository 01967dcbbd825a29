import { writeFile } from 'node:fs/promises';

export interface UpgradeCommandOptions {
  longLived?: string;
  duration?: string;
  json?: string;
}

/**
 * `zmesh harness upgrade`: the ztunnel upgrade drill on the local cluster (root, BPF). Prints
 * the traffic's outcome and each node's old process; exit 0 only when every target is met.
 */
export async function runUpgrade(opts: UpgradeCommandOptions): Promise<number> {
  const longLived = Number(opts.longLived ?? '20');
  const duration = Number(opts.duration ?? '20');
  if (!Number.isInteger(longLived) || longLived < 1 || longLived > 500) {
    console.error(`zmesh harness upgrade: --long-lived: want 1..500, got ${opts.longLived}`);
    return 2;
  }
  if (!Number.isInteger(duration) || duration < 10 || duration > 3600) {
    console.error(`zmesh harness upgrade: --duration: want seconds 10..3600, got ${opts.duration}`);
    return 2;
  }
  // The flags first; the drill's modules (ztunnel, BPF) load only for flags that passed.
  const { BpfCapture } = await import('@zmesh/ztunnel');
  const why = await BpfCapture.unavailableReason();
  if (why) {
    console.error(`zmesh harness upgrade: needs the local cluster (root, BPF): ${why}`);
    return 2;
  }
  const { runUpgradeDrill } = await import('../upgrade/upgrade-drill.js');
  console.log(`upgrade drill: ${longLived} long-lived connections, a new one every 50 ms, ${duration} s`);
  const report = await runUpgradeDrill({
    longLived,
    durationMs: duration * 1000,
    echo: (l) => console.log(l),
  });
  const t = report.traffic;
  console.log(
    `new connections: ${t.newOk} ok, ${t.newFailed} failed ${JSON.stringify(t.newErrors)}; long-lived: ${t.liveBroken} broken ${JSON.stringify(t.liveErrors)}, ${t.pongs}/${t.pings} pings answered`,
  );
  for (const n of report.nodes)
    console.log(
      `${n.node}: old ztunnel served while draining: ${n.servedWhileDraining}; exited ${n.exitedAfterMs ?? '(not)'} ms after the last connection, code ${n.exitCode}; RSS during the overlap old ${n.rssKb.old} kB + new ${n.rssKb.new} kB; processes answering the metrics port ${n.metricsServedBy}`,
    );
  if (opts.json) {
    await writeFile(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`wrote ${opts.json}`);
  }
  console.log(report.passed ? 'PASS: every target met' : 'FAIL: a target was missed');
  return report.passed ? 0 : 1;
}
