import { judge, runSoak, type SoakSample, slope, soakLimits, soakTable } from '@zmesh/harness';
import test from 'ava';

/**
 * The soak's short form (`zmesh harness soak --minutes 2`): a ztunnel pair on loopback
 * under good traffic and hostile peers. Loopback only, no root needed.
 */
test.serial(
  'soak, short form: the proxies stay alive and bounded across a control-plane kill, no good request fails',
  async (t) => {
    t.timeout(270_000);
    const report = await runSoak({ seconds: 120, sampleMs: 1000 });
    t.log(`\n${soakTable(report)}`);
    t.is(report.died, undefined);
    t.is(report.traffic.failed, 0, report.traffic.firstFailure);
    // On a 2-core machine at load 20, with the floods, 80-150 in 20 s.
    t.true(report.traffic.requests > 50, `${report.traffic.requests} good requests`);
    for (const name of Object.keys(report.hostile)) t.true(report.hostile[name]! > 0, `hostile ${name} ran`);
    // Peers with a valid mesh certificate: every flood answered by GOAWAY, every slow reader
    // closed at its PING deadline (4-6 s in), none held.
    for (const [kind, n] of Object.entries(report.mesh.floods)) t.true(n > 0, `mesh flood ${kind} ran`);
    t.is(report.mesh.unanswered, 0, 'every rapid-reset and CONTINUATION flood got GOAWAY');
    t.true(report.mesh.slowReadersClosed > 0, `${report.mesh.slowReadersClosed} slow readers closed`);
    t.is(report.mesh.slowReadersHeld, 0, 'no slow reader outlived its deadline');
    // One control-plane restart, a quarter in, by SIGKILL to its pid: it answers again from
    // its state directory, every proxy (both ztunnels, the waypoint) reconnects on a new
    // stream, and good requests went through while it was down (last-known-good serving).
    const cp = report.controlPlane;
    t.is(cp.restarts.length, 1, 'the control plane restarted once');
    const restart = cp.restarts[0]!;
    t.is(restart.signal, 'SIGKILL');
    t.not(restart.downSeconds, null, 'the new control plane answered /healthz');
    for (const [proxy, s] of Object.entries(restart.reconnectSeconds)) t.not(s, null, `${proxy} reconnected`);
    t.is(cp.reconnects, 3);
    t.true(
      restart.requestsWhileDown > 0,
      `${restart.requestsWhileDown} good requests while the control plane was down`,
    );
    t.is(restart.failedWhileDown, 0);
    t.is(cp.incarnations.length, 2);
    t.not(cp.incarnations[0]!.pid, cp.incarnations[1]!.pid);
    for (const [proxy, trend] of Object.entries(report.proxies)) {
      t.true(trend.xdsConnected, `${proxy} on xDS at the end`);
      t.true(trend.samples.length > 10, `${proxy} sampled across the restart`);
      for (const s of trend.series)
        t.true(s.passed, `${proxy} ${s.name} grows ${s.slopePerMinute.toFixed(1)}/min`);
    }
    t.true(report.passed);
  },
);

test('the verdict is a least-squares slope over the second half, against its limit', (t) => {
  t.is(
    slope([
      [0, 1],
      [1, 3],
      [2, 5],
    ]),
    2,
  );
  // fds leaking 15 a second (the reset leak the soak found) fail; a warm-up that levels off passes.
  const leak: SoakSample[] = Array.from({ length: 20 }, (_, i) => ({
    t: i,
    rssBytes: 1,
    heapBytes: 1,
    fds: 50 + 15 * i,
    loopDelay: 0.01,
  }));
  const fds = judge(leak, soakLimits(20)).find((s) => s.name === 'fds')!;
  t.false(fds.passed);
  t.is(Math.round(fds.slopePerMinute), 900);
  const warm: SoakSample[] = Array.from({ length: 20 }, (_, i) => ({
    t: i,
    rssBytes: 2 ** 20 * (80 + Math.min(i, 8) * 2),
    heapBytes: 2 ** 20 * 20,
    fds: 60 + (i % 3),
    loopDelay: 0.01,
  }));
  t.true(judge(warm, soakLimits(20)).every((s) => s.passed));
  // V8's heap between major collections: a sawtooth whose floor stays put passes over 5 minutes.
  const saw: SoakSample[] = Array.from({ length: 60 }, (_, i) => ({
    t: 5 * i,
    rssBytes: 2 ** 20 * 150,
    heapBytes: 2 ** 20 * (20 + (i % 12) * 7),
    fds: 70,
    loopDelay: 0.01 + (i % 5) * 0.002,
  }));
  t.true(judge(saw, soakLimits(300)).every((s) => s.passed));
});
