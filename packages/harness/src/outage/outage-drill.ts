import type { ResultPromise } from 'execa';
import type { LocalMesh } from '../mesh/local-mesh.js';
import { startMesh } from '../mesh/mesh.js';
import type { MeshSpec } from '../mesh/mesh-spec.js';
import { parseRateResult, RATE_CLIENT } from '../mesh/pod-programs.js';
import { firstFiring } from './alert-eval.js';
import { DrillRecorder, type DrillReport } from './drill-report.js';
import { drillSeries } from './drill-series.js';
import { MetricsScraper } from './metrics-scraper.js';
import { ProxyWatch, pidNode, sleep, waitFor } from './proxy-watch.js';
import { STEADY_CLIENT, STEADY_SERVER, TrafficLog, tally } from './steady-traffic.js';

export interface OutageDrillOptions {
  /** How long the control plane stays unreachable, seconds; must outlast the certificates. */
  durationSeconds?: number;
  /** Workload certificate lifetime (the control plane's --max-cert-ttl): time compression. */
  certTtlSeconds?: number;
  echo?: (line: string) => void;
}

export const DEFAULT_DRILL_CERT_TTL_SECONDS = 16;
const TRAFFIC_EVERY_MS = 200;
const SCRAPE_EVERY_MS = 250;
/** xDS reconnect and certificate retry bounds: compressed like the certificate lifetime. */
const DRILL_BACKOFF = '100:1000';
/** Bound on a restart with persisted keys (docs/design.md §5). */
const PERSISTED_RESTART_BUDGET_MS = 2000;
const PORT = 8080;

/** Three nodes: keys persisted on a and b, not on c; `newpod` appears during the outage. */
export const DRILL_SPEC: MeshSpec = {
  nodes: ['node-a', 'node-b', 'node-c'],
  pods: [
    { name: 'client', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
    { name: 'newpod', namespace: 'team-a', serviceAccount: 'newpod', node: 'node-a' },
    { name: 'server', namespace: 'team-b', serviceAccount: 'server', node: 'node-b' },
    { name: 'bystander', namespace: 'team-c', serviceAccount: 'bystander', node: 'node-c' },
    // Outside the mesh (never enrolled): tries plaintext straight at the new pod.
    { name: 'outsider', namespace: 'team-c', serviceAccount: 'outsider', node: 'node-c' },
  ],
};

/**
 * `zmesh harness outage`: the control plane becomes unreachable under steady traffic on the
 * local cluster, and the drill checks docs/design.md §8 row by row (see the phases below), then
 * heals it and checks convergence. Everything is torn down on every exit path.
 */
export async function runOutageDrill(opts: OutageDrillOptions = {}): Promise<DrillReport> {
  const ttl = opts.certTtlSeconds ?? DEFAULT_DRILL_CERT_TTL_SECONDS;
  const duration = opts.durationSeconds ?? ttl + 5;
  const mesh = await startMesh({
    run: 'cluster',
    spec: DRILL_SPEC,
    enroll: (p) => p.name !== 'newpod' && p.name !== 'outsider',
    unconfigured: (p) => p.name === 'newpod' || p.name === 'outsider',
    // The refusals the drill provokes are warnings by design; ZMESH_LOG=warn shows them.
    ztunnelLog: process.env.ZMESH_LOG ?? 'error',
    controlPlane: {
      maxCertTtlSeconds: ttl,
      persistKeys: (node) => node !== 'node-c',
      xdsBackoff: DRILL_BACKOFF,
    },
  });
  const procs: ResultPromise[] = [];
  const scraper = new MetricsScraper(DRILL_SPEC.nodes, (n) => mesh.metrics(n), SCRAPE_EVERY_MS);
  try {
    const drill = new OutageDrill(mesh, scraper, procs, duration, opts.echo);
    await drill.run();
    return drill.report();
  } finally {
    scraper.stop();
    for (const p of procs) p.kill('SIGKILL');
    await mesh.down();
  }
}

class OutageDrill {
  private rec!: DrillRecorder;
  private client!: TrafficLog;
  private server!: TrafficLog;
  private newClient?: TrafficLog;
  private newServer?: TrafficLog;
  private readonly watch: ProxyWatch;
  private tOut = 0;
  private tHeal = 0;
  /** Wall-clock windows in which node-b's ztunnel was down on purpose. */
  private restartWindow: [number, number] = [0, 0];
  private readonly marks: Array<{ t: number; label: string }> = [];

  constructor(
    private readonly mesh: LocalMesh,
    private readonly scraper: MetricsScraper,
    private readonly procs: ResultPromise[],
    private readonly durationS: number,
    private readonly echo?: (line: string) => void,
  ) {
    this.watch = new ProxyWatch(mesh);
  }

  async run(): Promise<void> {
    await this.startTraffic();
    await this.baseline();
    await this.cut();
    await this.keepsServing();
    await this.newPod();
    await this.configChange();
    await this.restartWithKeys();
    await this.restartWithoutKeys();
    await this.certificatesExpire();
    await this.heal();
    await this.converge();
    await this.restartFromState();
  }

  report(): DrillReport {
    return {
      checks: this.rec.checks,
      timeline: this.rec.timeline,
      series: drillSeries(this.rec, this.client, this.scraper),
      marks: this.marks.map((m) => ({ t: this.rec.at(m.t), label: m.label })),
    };
  }

  private mark(label: string, t = Date.now()): void {
    this.marks.push({ t, label });
  }

  private spawn(pod: string, program: string, args: string[]): TrafficLog {
    const child = this.mesh.cluster.runInPod(this.mesh.pod(pod), ['node', '-e', program, ...args], {
      reject: false,
      stdout: 'pipe',
    });
    this.procs.push(child);
    return new TrafficLog(pod, child);
  }

  private async startTraffic(): Promise<void> {
    this.server = this.spawn('server', STEADY_SERVER, [String(PORT)]);
    await waitFor(() => this.server.events.some((e) => e.k === 'listening'), 10_000, 'server listening');
    this.rec = new DrillRecorder(Date.now(), this.echo);
    this.client = this.spawn('client', STEADY_CLIENT, [
      this.mesh.pod('server').ipv4,
      String(PORT),
      String(TRAFFIC_EVERY_MS),
    ]);
    this.scraper.start();
    this.rec.note(
      'mesh up (3 nodes, control plane over xDS + CA), steady traffic client -> server',
      `a new connection and a ping on a long-lived one every ${TRAFFIC_EVERY_MS} ms`,
    );
  }

  private async baseline(): Promise<void> {
    await sleep(2000);
    const fresh = tally(this.client.between('new', this.rec.t0));
    const live = tally(this.client.between('live', this.rec.t0));
    this.rec.note('baseline', `new ${fresh.ok} ok / ${fresh.failed} failed; live pings ${live.ok} ok`);
    this.rec.check(
      'baseline traffic flows through the mesh',
      fresh.ok >= 5 && fresh.failed === 0 && live.ok >= 5 && live.failed === 0,
      `new connections ${fresh.ok} ok, ${fresh.failed} failed; long-lived pings ${live.ok} ok, ${live.failed} failed`,
    );
  }

  private async cut(): Promise<void> {
    this.tOut = Date.now();
    await this.mesh.controlPlane!.link.cut();
    this.mesh.controlPlane!.pause();
    this.mark('control plane stopped', this.tOut);
    this.rec.note(
      '(1) control plane stopped',
      'process frozen (SIGSTOP) and its xDS/CA socket cut: streams reset, new connects refused',
      this.tOut,
    );
    const down = await this.watch.allMetric('zmesh_xds_connected', (v) => v === 0, 5000);
    this.rec.note(
      'every proxy sees it',
      down ? 'zmesh_xds_connected=0 on all nodes' : 'NOT all disconnected',
    );
  }

  private async keepsServing(): Promise<void> {
    await sleep(2500);
    const now = Date.now();
    const rows = await this.watch.metricsRows();
    const exported = rows.every((r) => r.connected === 0 && r.disconnected > 0 && r.age > 0);
    const alert = await firstFiring('ZmeshXdsDisconnected', this.scraper.of('node-a'), [
      'zmesh_xds_connected',
    ]);
    const alertOk = alert.t !== undefined && alert.t > this.tOut;
    if (alert.t) this.rec.note('ZmeshXdsDisconnected (shipped rule, promtool) on node-a', 'firing', alert.t);
    this.rec.check(
      'outage is visible: xds_connected=0, disconnected seconds and snapshot age exported, alert fires',
      exported && alertOk,
      `${rows.map((r) => `${r.node}: connected=${r.connected} disconnected=${r.disconnected}s age=${r.age}s`).join('; ')}; ZmeshXdsDisconnected ${alertOk ? `firing from t=${this.rec.at(alert.t!)}s` : `not firing after the cut${alert.error ? `: ${alert.error}` : ''}`}`,
    );
    const fresh = tally(this.client.between('new', this.tOut, now));
    const live = this.client.between('live', this.tOut, now);
    const liveT = tally(live);
    const conns = [...new Set(live.map((e) => e.conn))];
    this.rec.note(
      '(2) traffic during the outage',
      `new ${fresh.ok} ok / ${fresh.failed} failed; live ${liveT.ok} ok`,
    );
    this.rec.check(
      'existing and new connections keep working while certificates are valid',
      fresh.ok >= 5 && fresh.failed === 0 && liveT.ok >= 5 && liveT.failed === 0 && conns.length === 1,
      `new ${fresh.ok} ok, ${fresh.failed} failed; long-lived connection #${conns.join(',#')}: ${liveT.ok} pings ok, ${liveT.failed} failed`,
    );
  }

  private async newPod(): Promise<void> {
    const pod = this.mesh.pod('newpod');
    await this.mesh.enroll(pod);
    this.rec.note('(3) pod "newpod" created and enrolled during the outage', 'capture acknowledged');
    const t = Date.now();
    this.newServer = this.spawn('newpod', STEADY_SERVER, [String(PORT)]);
    this.newClient = this.spawn('newpod', STEADY_CLIENT, [
      this.mesh.pod('server').ipv4,
      String(PORT),
      String(TRAFFIC_EVERY_MS),
    ]);
    const inbound = await this.mesh.cluster.exec(
      this.mesh.pod('client'),
      ['node', '-e', RATE_CLIENT, pod.ipv4, String(PORT), '3', '5', '1000'],
      { timeoutMs: 10_000 },
    );
    const rate = parseRateResult(inbound.stdout);
    const direct = await this.mesh.cluster.exec(
      this.mesh.pod('outsider'),
      ['node', '-e', RATE_CLIENT, pod.ipv4, String(PORT), '3', '5', '1000'],
      { timeoutMs: 10_000 },
    );
    const plain = parseRateResult(direct.stdout);
    await sleep(500);
    const out = tally(this.newClient.between('new', t));
    const accepted = this.newServer.between('accepted', t).length;
    const ready = await this.mesh.admin('node-a', 15021, '/healthz/ready');
    const uid = this.mesh.workloadUid(pod);
    const pending = ready.status === 503 && ready.body.includes(`${uid}: enrolled, no configuration yet`);
    this.rec.note(
      'newpod while the control plane is down',
      `its outbound: ${out.ok} ok / ${out.failed} refused; inbound from a mesh pod: ${rate.ok} ok / ${rate.failed} refused; plaintext from outside the mesh: ${plain.ok} ok / ${plain.failed} dropped; node-a ready=${ready.status}`,
    );
    this.rec.check(
      'a pod created during the outage is captured and pending: sends and receives nothing',
      out.ok === 0 && out.failed >= 3 && rate.ok === 0 && plain.ok === 0 && accepted === 0 && pending,
      `outbound ${out.failed} refused (${out.errors.join(',')}), inbound from the mesh ${rate.failed} refused, plaintext from outside ${plain.failed} dropped (${Object.keys(plain.errors).join(',') || 'no answer'}), its server accepted ${accepted}; node-a /healthz/ready ${ready.status}: "${uid}: enrolled, no configuration yet"${pending ? '' : ' NOT reported'}`,
    );
  }

  private async configChange(): Promise<void> {
    // Back up but still cut off from the proxies (a partition), so an operator can apply a
    // change that cannot reach them yet: it must show as pending, never as applied.
    this.mesh.controlPlane!.resume();
    this.rec.note('control plane process resumed', 'still unreachable by every proxy (socket cut)');
    const generation = await this.mesh.controlPlane!.apply(
      this.mesh.objectsYaml([this.mesh.pod('newpod')]),
      'newpod.yaml',
    );
    this.rec.note(
      '(4) config change applied during the outage',
      `Pod team-a/newpod, generation ${generation}`,
    );
    const rows = await this.mesh.controlPlane!.proxyStatus();
    const addr = (r: (typeof rows)[number]) =>
      Object.entries(r.types).find(([k]) => k.endsWith('Address'))?.[1];
    const pending = rows.length === 3 && rows.every((r) => !r.connected && addr(r)?.state === 'PENDING');
    this.rec.check(
      'proxy status shows the change pending on every (disconnected) proxy, never applied',
      pending,
      rows
        .map(
          (r) =>
            `${r.node}: connected=${r.connected} Address ${addr(r)?.state} (${addr(r)?.pending.count} pending)`,
        )
        .join('; '),
    );
  }

  private async restartWithKeys(): Promise<void> {
    const stopAt = Date.now();
    await this.mesh.stopZtunnel('node-b');
    const t0 = Date.now();
    this.mark('restart node-b (keys kept)', t0);
    await this.mesh.restartZtunnel('node-b');
    const readyAt = await this.watch.readyAt('node-b', 10_000);
    await waitFor(() => this.client.between('new', t0).some((e) => e.ok), 5000, 'served').catch(() => {});
    const servedAt = this.client.between('new', t0).find((e) => e.ok)?.t;
    this.restartWindow = [stopAt, servedAt ?? Date.now()];
    const readyMs = readyAt ? readyAt - t0 : undefined;
    const servedMs = servedAt ? servedAt - t0 : undefined;
    this.rec.note(
      '(5) node-b ztunnel restarted during the outage, --persist-keys on',
      `ready after ${readyMs ?? 'never'} ms, first connection served after ${servedMs ?? 'never'} ms`,
      t0,
    );
    this.rec.check(
      `restart with persisted keys serves from the on-disk snapshot within ${PERSISTED_RESTART_BUDGET_MS} ms`,
      readyMs !== undefined &&
        servedMs !== undefined &&
        Math.max(readyMs, servedMs) <= PERSISTED_RESTART_BUDGET_MS,
      `process start to /healthz/ready 200: ${readyMs ?? '-'} ms; to first client connection served: ${servedMs ?? '-'} ms`,
    );
  }

  private async restartWithoutKeys(): Promise<void> {
    const t0 = Date.now();
    this.mark('restart node-c (no keys)', t0);
    await this.mesh.restartZtunnel('node-c');
    const answers: Array<{ status: number; reasons: string[] }> = [];
    for (let i = 0; i < 8; i++) {
      await sleep(250);
      const r = await this.mesh.admin('node-c', 15021, '/healthz/ready').catch(() => undefined);
      if (r)
        answers.push({ status: r.status, reasons: (JSON.parse(r.body) as { reasons: string[] }).reasons });
    }
    const live = await this.mesh.admin('node-c', 15021, '/healthz/live').catch(() => undefined);
    const last = answers.at(-1);
    const waiting = answers.length > 0 && answers.every((a) => a.status === 503);
    const says = last?.reasons.some((r) => r.includes('no valid certificate')) ?? false;
    this.rec.note(
      '(5) node-c ztunnel restarted during the outage, keys in memory only',
      `/healthz/ready ${last?.status}: ${last?.reasons.join('; ')}; /healthz/live ${live?.status}`,
      t0,
    );
    this.rec.check(
      'restart without persisted keys is not ready until the CA returns, and says why (liveness stays 200)',
      waiting && says && live?.status === 200,
      `${answers.length} readiness probes over 2 s all ${waiting ? '503' : 'NOT 503'}: "${last?.reasons.join('; ')}"; live ${live?.status}`,
    );
  }

  private async certificatesExpire(): Promise<void> {
    const notAfter = await this.watch.notAfter({ 'node-a': 'client', 'node-b': 'server' });
    const expiry = Math.min(...Object.values(notAfter));
    this.mark('certificate expires', expiry);
    this.rec.note(
      '(6) certificates run out',
      Object.entries(notAfter)
        .map(([id, t]) => `${id} not-after t=${this.rec.at(t)}s`)
        .join(', '),
      expiry,
    );
    const end = this.tOut + this.durationS * 1000;
    await sleep(Math.max(0, end - Date.now()));
    await this.judgeExpiry(expiry, end);
  }

  private async judgeExpiry(expiry: number, end: number): Promise<void> {
    const [a, b] = await Promise.all(
      ['node-a', 'node-b'].map((n) =>
        firstFiring('ZmeshCertificateHorizon', this.scraper.of(n), [
          'zmesh_cert_seconds_to_earliest_expiry',
          'zmesh_cert_earliest_lifetime_seconds',
        ]),
      ),
    );
    const fired = [a, b].flatMap((f) => (f?.t ? [f.t] : []));
    const alertAt = fired.length ? Math.min(...fired) : undefined;
    const [w0, w1] = this.restartWindow;
    const refused = this.client
      .between('new', this.tOut, end)
      .find((e) => !e.ok && !(e.t >= w0 && e.t <= w1));
    if (alertAt) this.mark('alert fires', alertAt);
    this.rec.note(
      'ZmeshCertificateHorizon (shipped rule, promtool on scraped series)',
      alertAt ? 'firing' : `not firing${a?.error ? `: ${a.error}` : ''}`,
      alertAt ?? end,
    );
    if (refused)
      this.rec.note(
        'first new tunnel refused',
        `client sees ${refused.e ?? 'connection closed, no answer'}`,
        refused.t,
      );
    this.rec.check(
      'the certificate alert fires during the outage, before the first refused tunnel',
      alertAt !== undefined && refused !== undefined && alertAt > this.tOut && alertAt < refused.t,
      `alert t=${alertAt ? this.rec.at(alertAt) : '-'}s, first refusal t=${refused ? this.rec.at(refused.t) : '-'}s, earliest not-after t=${this.rec.at(expiry)}s`,
    );
    this.judgeFailClosed(expiry, end);
  }

  private judgeFailClosed(expiry: number, end: number): void {
    const after = tally(this.client.between('new', expiry + 500, end));
    // ztunnel connects to the server from the client's own address (source preserved), so an
    // address cannot tell a tunnelled connection from a plaintext one. Any address but the
    // two pods' is foreign; and after expiry the server must accept nothing at all, since
    // ztunnel refuses every new tunnel then and strict inbound drops everything else.
    const server = this.mesh.pod('server');
    const client = this.mesh.pod('client');
    const addrs = (p: typeof server) => [p.ipv4, `::ffff:${p.ipv4}`, p.ipv6];
    const ours = new Set([...addrs(server), ...addrs(client)]);
    const answers = this.client.events.flatMap((e) => (e.answer ? [e.answer] : []));
    const foreign = [...new Set(answers.filter((a) => !ours.has(a)))];
    const accepted = [
      ...this.server.events.filter((e) => e.k === 'accepted' && !ours.has(e.from ?? '')),
      ...this.server.between('accepted', expiry + 500, end),
    ];
    this.rec.note('after expiry', `new ${after.ok} ok / ${after.failed} refused (${after.errors.join(',')})`);
    this.rec.check(
      'expired certificates: new tunnels refused (fail closed), never plaintext',
      expiry < end && after.ok === 0 && after.failed >= 3 && foreign.length === 0 && accepted.length === 0,
      `${expiry < end ? '' : 'certificates did not expire before the outage ended (raise --duration); '}${after.failed} refused, ${after.ok} succeeded after not-after; answers from outside the two pods: ${foreign.length ? foreign.join(',') : 'none'} (of ${answers.length}); accepted by the server after expiry or from elsewhere: ${accepted.length}`,
    );
  }

  private async heal(): Promise<void> {
    this.tHeal = Date.now();
    this.mark('control plane back', this.tHeal);
    await this.mesh.controlPlane!.link.heal();
    this.rec.note('(7) control plane reachable again', 'socket served again', this.tHeal);
    const link = this.mesh.controlPlane!.link;
    const first = new Map<string, number>();
    await waitFor(
      () => {
        for (const a of link.accepts) {
          if (a.t < this.tHeal || a.pid === undefined) continue;
          const node = pidNode(this.mesh, a.pid);
          if (node && !first.has(node)) first.set(node, a.t - this.tHeal);
        }
        return first.size === DRILL_SPEC.nodes.length;
      },
      10_000,
      'reconnects',
    ).catch(() => {});
    const delays = [...first.values()];
    const spread = delays.length ? Math.max(...delays) - Math.min(...delays) : 0;
    const list = [...first].map(([n, d]) => `${n} +${d} ms`).join(', ');
    this.rec.note('proxies reconnect', list);
    this.rec.check(
      'every proxy reconnects, spread over time by jittered backoff',
      first.size === DRILL_SPEC.nodes.length && spread >= 10,
      `${list}; spread ${spread} ms`,
    );
  }

  private async converge(): Promise<void> {
    const cp = this.mesh.controlPlane!;
    const synced = await waitFor(
      async () => {
        const rows = await cp.proxyStatus();
        return (
          rows.length === 3 &&
          rows.every((r) => r.connected && Object.values(r.types).every((t) => t.state === 'SYNCED'))
        );
      },
      15_000,
      'synced',
    ).then(
      () => Date.now(),
      () => undefined,
    );
    const uid = this.mesh.workloadUid(this.mesh.pod('newpod'));
    const dumps = await Promise.all(DRILL_SPEC.nodes.map((n) => this.mesh.admin(n, 15000, '/config_dump')));
    const everywhere = dumps.every((d) => d.body.includes(`"uid": "${uid}"`));
    this.rec.note('proxy status', synced ? 'every proxy SYNCED, nothing pending' : 'NOT synced', synced);
    this.rec.check(
      'the change made during the outage reaches every proxy; proxy status converges to SYNCED',
      synced !== undefined && everywhere,
      `SYNCED at t=${synced ? this.rec.at(synced) : '-'}s; newpod in config_dump of ${dumps.filter((d) => d.body.includes(`"uid": "${uid}"`)).length}/3 proxies`,
    );
    await this.recovered();
  }

  private async recovered(): Promise<void> {
    const readyAt = await this.watch.allReady(20_000);
    const t = readyAt ?? Date.now();
    await waitFor(
      () => (this.newClient?.between('new', this.tHeal) ?? []).some((e) => e.ok),
      10_000,
      'newpod',
    ).catch(() => {});
    await waitFor(() => this.client.between('new', this.tHeal).some((e) => e.ok), 10_000, 'client').catch(
      () => {},
    );
    const newpodOk = this.newClient?.between('new', this.tHeal).find((e) => e.ok)?.t;
    const clientOk = this.client.between('new', this.tHeal).find((e) => e.ok)?.t;
    this.rec.note('every node /healthz/ready 200', readyAt ? 'yes' : 'NO', t);
    if (clientOk) this.rec.note('client -> server served again', 'renewed certificates', clientOk);
    if (newpodOk) this.rec.note('newpod -> server served', 'newpod configured and certified', newpodOk);
    this.rec.check(
      'recovery: every proxy ready (node-c included), client and newpod traffic flows',
      readyAt !== undefined && clientOk !== undefined && newpodOk !== undefined,
      `all ready at t=${readyAt ? this.rec.at(readyAt) : '-'}s; client served at t=${clientOk ? this.rec.at(clientOk) : '-'}s; newpod served at t=${newpodOk ? this.rec.at(newpodOk) : '-'}s`,
    );
  }

  /**
   * (7) The control plane is killed (-9) and started again from its state dir while traffic
   * flows: every applied object is back, the node tokens it issued before are still valid
   * (every proxy reconnects, nothing re-minted), proxy status converges, and no connection
   * fails meanwhile (proxies serve last-known-good).
   */
  private async restartFromState(): Promise<void> {
    const cp = this.mesh.controlPlane!;
    if (cp.stateDir === false) {
      this.rec.note(
        '(7) control-plane restart from its state dir',
        'skipped: no state dir (node:sqlite needs Node 22.5+)',
      );
      return;
    }
    // Certificates live only seconds here (time-compressed): kill right after a renewal, so
    // the restart has the longest lifetime ahead, and judge traffic only while they are valid.
    const certs = { 'node-a': 'client', 'node-b': 'server' };
    const earliest = async () => Math.min(...Object.values(await this.watch.notAfter(certs)));
    const held = await earliest();
    await waitFor(async () => (await earliest()) > held, 15_000, 'renewal').catch(() => {});
    const expiry = await earliest();
    const before = await cp.objects();
    const t0 = Date.now();
    const liveBefore = this.client.between('live', this.tHeal).at(-1)?.conn;
    await cp.killAndRestart();
    const tUp = Date.now();
    this.mark('control plane killed -9, restarted from its state dir', t0);
    this.rec.note(
      '(7) control plane killed (SIGKILL) and restarted from its state dir',
      `serving again after ${tUp - t0} ms`,
      t0,
    );
    const after = await cp.objects();
    const synced = await waitFor(
      async () => {
        const rows = await cp.proxyStatus();
        return (
          rows.length === 3 &&
          rows.every((r) => r.connected && Object.values(r.types).every((t) => t.state === 'SYNCED'))
        );
      },
      20_000,
      'synced after restart',
    ).then(
      () => Date.now(),
      () => undefined,
    );
    const kept =
      after.objects.length === before.objects.length &&
      after.objects.every((k, i) => k === before.objects[i]);
    this.rec.note('proxy status after the restart', synced ? 'every proxy SYNCED' : 'NOT synced', synced);
    this.rec.check(
      'control plane killed -9 and restarted from its state dir: every object kept, every proxy back with the token it had, SYNCED',
      kept && after.generation >= before.generation && synced !== undefined,
      `${after.objects.length}/${before.objects.length} objects kept${kept ? '' : ' (DIFFER)'}, generation ${before.generation} -> ${after.generation}; every proxy SYNCED at ${synced ? `t=${this.rec.at(synced)}s` : 'NEVER'} (restart took ${tUp - t0} ms)`,
    );
    await sleep(1000);
    const now = Date.now();
    const end = Math.min(now, expiry);
    const fresh = tally(this.client.between('new', t0, end));
    const live = this.client.between('live', t0, end);
    const liveT = tally(live);
    const sameConn = live.every((e) => e.conn === liveBefore);
    const expired =
      expiry < now ? ` (certificates expired at t=${this.rec.at(expiry)}s: judged until then)` : '';
    this.rec.check(
      'traffic through the control-plane restart: no new or long-lived connection fails while certificates are valid',
      fresh.ok >= 3 && fresh.failed === 0 && liveT.ok >= 3 && liveT.failed === 0 && sameConn,
      `new ${fresh.ok} ok, ${fresh.failed} failed; long-lived connection #${liveBefore}: ${liveT.ok} pings ok, ${liveT.failed} failed${sameConn ? '' : ' (connection changed)'}${expired}`,
    );
  }
}
