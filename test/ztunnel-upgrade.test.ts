import { runUpgradeDrill } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';

/**
 * The upgrade drill, short form (docs/upgrade.md; `bin/zmesh harness upgrade` is the long
 * one): while a client opens a connection every 50 ms and holds 5 long-lived connections
 * pinging every 100 ms, a successor ztunnel starts on the destination node, then on the
 * source node (the node agent hands it the pods), and each old one gets SIGTERM. Nothing is
 * refused or broken, and each old process exits once its last connection closes.
 * Needs root and BPF (the netns cluster with real capture).
 */
const unavailable = await BpfCapture.unavailableReason();
const drill = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`ztunnel upgrade drill skipped: ${unavailable}`, () => {});

drill(
  'ztunnel upgrades on the destination and the source node refuse no new connection and break no long-lived one',
  async (t) => {
    t.timeout(60_000);
    const report = await runUpgradeDrill({ longLived: 5, durationMs: 12_000, echo: (l) => t.log(l) });
    const r = report.traffic;
    t.log(JSON.stringify(report));
    t.true(r.newOk > 100, `new connections went through (${r.newOk})`);
    t.is(r.newFailed, 0, `no new connection refused: ${JSON.stringify(r.newErrors)}`);
    t.is(r.liveBroken, 0, `no long-lived connection broken: ${JSON.stringify(r.liveErrors)}`);
    t.true(r.pongs >= r.pings - 5, 'every ping answered');
    t.deepEqual(
      report.nodes.map((n) => n.node),
      ['node-b', 'node-a'],
    );
    for (const n of report.nodes) {
      t.true(n.servedWhileDraining, `the old ztunnel on ${n.node} kept its connections after SIGTERM`);
      t.regex(n.draining, /zmesh_drain_connections\{side="(inbound|outbound)"\} [1-9]/, n.node);
      t.not(n.exitedAfterMs, undefined, `the old ztunnel on ${n.node} exited`);
      t.true((n.exitedAfterMs ?? -1) >= 0, `${n.node}: only after its last connection closed`);
      t.is(n.exitCode, 0);
      t.true(n.rssKb.old > 0 && n.rssKb.new > 0, 'both processes measured during the overlap');
      t.is(n.metricsServedBy, 2, `${n.node}: old and new both answered the one metrics port (SO_REUSEPORT)`);
    }
    t.true(report.passed);
  },
);
