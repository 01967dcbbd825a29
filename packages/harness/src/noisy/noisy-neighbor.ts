import { processCpuSecondsSync, residentSetSync } from '../bench/proc-stat.js';
import { lowerMedianBy, upperMedianBy } from '../bench/stats.js';
import type { LocalMesh } from '../mesh/local-mesh.js';
import { startMesh } from '../mesh/mesh.js';
import { AGGRESSOR, SERVERS, VICTIM } from './noisy-programs.js';

export const SCENARIOS = ['storm', 'flood', 'slow', 'hoard'] as const;
export type Scenario = (typeof SCENARIOS)[number];
/**
 * The aggressor's pod runs but attacks nothing: the same measurement as a scenario, so its
 * ratio is this machine's run-to-run noise, printed beside the attacks (never judged).
 */
export const CONTROL = 'control' as const;

interface VictimStats {
  p50_ms: number;
  p99_ms: number;
  rps: number;
}

/**
 * One loaded run. `victim.solo` is the reference the ratios divide by: the lower median of every
 * round's solo run with the same fairness setting; `round_solo` is this round's own.
 */
interface RoundResult {
  victim: { solo: VictimStats; loaded: VictimStats };
  round_solo: VictimStats;
  p99_ratio: number;
  rps_ratio: number;
  aggressor: { admitted: number; refused: number };
  ztunnel: { cpu_s: number; rss_mb: number };
  /**
   * Byte fairness's lag pauses of each tenant during the loaded run
   * (`zmesh_tenant_read_pauses_total{reason="lag"}`, every worker's summed): whether the
   * mechanism engaged, which a p99 on a noisy machine cannot say on its own.
   */
  lag_pauses: { aggressor: number; victim: number };
}

/**
 * A scenario's result: its median round by p99 ratio (the upper one of two), whose solo and
 * loaded numbers give that ratio, with ztunnel's peak RSS over all rounds; every round in
 * `rounds`.
 */
export interface ScenarioResult extends RoundResult {
  name: Scenario | typeof CONTROL;
  fairness: 'on' | 'off';
  /** ztunnel's `--workers` for this run. */
  workers: number;
  rounds: RoundResult[];
}

/** Per fairness setting: every solo run, and the reference (`lowerMedianStats`) ratios use. */
export type SoloRuns = Partial<Record<'on' | 'off', { runs: VictimStats[]; reference: VictimStats }>>;

export interface NoisyOptions {
  quick?: boolean;
  /** Only these scenarios (default: all), e.g. to iterate on one attack. */
  scenarios?: readonly Scenario[];
  /** Only these fairness settings (default: on, then off). */
  fairness?: readonly ('on' | 'off')[];
  /** Solo-then-loaded rounds per scenario (default 3, `quick` 1). */
  rounds?: number;
  /** ztunnel's `--workers` (default 1): the pods, aggressor's included, sharded over threads. */
  workers?: number;
  progress?: (line: string) => void;
}

/** Load generators run here; the node's ztunnel alone on the other CPU (PROXY_CPU). */
const LOAD_CPU = '1';
/**
 * The aggressor's client and server share the load CPU with the victim's client at a
 * lower priority (nice 10): they get what the victim leaves, and the victim's latency is
 * ztunnel's, not its own generator's wait for the CPU. At nice 0, a storm refused by its
 * quota looped faster, starved the victim's generator and showed up as victim latency.
 */
const AGGRESSOR_NICE = ['nice', '-n', '10'];
const PROXY_CPU = '0';

/**
 * One node: clients and servers of both tenants share its ztunnel, so every byte of both
 * crosses that one process twice (outbound, then inbound) and nothing else shares its CPU.
 * With a second node both ztunnels would time-share the one proxy CPU and the run would
 * measure the kernel's scheduler between them as much as either proxy's fairness.
 */
const SPEC = {
  nodes: ['node-a'],
  pods: [
    { name: 'victim', namespace: 'victim', serviceAccount: 'client', node: 'node-a' },
    { name: 'aggressor', namespace: 'aggressor', serviceAccount: 'client', node: 'node-a' },
    { name: 'victim-server', namespace: 'victim', serviceAccount: 'server', node: 'node-a' },
    { name: 'aggressor-server', namespace: 'aggressor', serviceAccount: 'server', node: 'node-a' },
  ],
};

/**
 * The noisy-neighbor harness (issue 8): a victim tenant at a third of its solo capacity
 * (1 KiB HTTP plus one bulk stream) shares node-a's ztunnel with an aggressor tenant that
 * runs one attack at a time; each scenario runs with fairness on and off, in one run.
 */
export async function runNoisyNeighbor(
  opts: NoisyOptions = {},
): Promise<{ scenarios: ScenarioResult[]; capacityRps: number; solo: SoloRuns }> {
  const say = opts.progress ?? (() => {});
  const seconds = opts.quick ? 3 : 10;
  const roundCount = Math.max(1, opts.rounds ?? (opts.quick ? 1 : 3));
  const scenarios: ScenarioResult[] = [];
  const soloRuns: SoloRuns = {};
  let capacityRps = 0;
  for (const fairness of opts.fairness ?? (['on', 'off'] as const)) {
    say(
      `fairness ${fairness}: bringing up the mesh (ztunnel on CPU ${PROXY_CPU}; load on CPU ${LOAD_CPU}, the aggressor's at nice 10)`,
    );
    const mesh = await startMesh({
      run: 'cluster',
      spec: SPEC,
      ztunnelCpus: PROXY_CPU,
      ztunnelArgs: [
        ...(fairness === 'on' ? [] : ['--fairness', 'off']),
        '--workers',
        String(opts.workers ?? 1),
      ],
      ztunnelLog: 'error',
    });
    try {
      await startServers(mesh);
      const server = mesh.pod('victim-server').ipv4;
      if (capacityRps === 0) {
        const sat = await victim(mesh, server, 0, seconds);
        capacityRps = sat.rps;
        say(
          `victim solo saturation: ${sat.rps.toFixed(0)} req/s (p50 ${sat.p50_ms} ms); fixed rate = a third`,
        );
      }
      const rate = Math.max(10, Math.round(capacityRps / 3));
      await warmUp(mesh, server, rate, seconds);
      // One p99 of a run at a third of capacity next to a saturating bulk stream swings
      // 1.5-2x between runs here, with no attack at all: each round measures the victim
      // solo, under each attack and solo again, and a scenario reports its median round.
      const names: Array<Scenario | typeof CONTROL> = [
        ...(fairness === 'on' ? [CONTROL] : []),
        ...(opts.scenarios ?? SCENARIOS),
      ];
      const rounds = new Map(names.map((n) => [n, [] as RoundResult[]]));
      const solos: VictimStats[] = [];
      for (let r = 1; r <= roundCount; r++) {
        await settle(mesh, say);
        const solo = await victim(mesh, server, rate, seconds);
        solos.push(solo);
        say(
          `fairness ${fairness}, round ${r}/${roundCount}: victim solo at ${rate} req/s: p50 ${solo.p50_ms} ms, p99 ${solo.p99_ms} ms`,
        );
        for (const name of names) {
          await settle(mesh, say);
          const result = await scenario(mesh, name, rate, seconds, solo);
          rounds.get(name)!.push(result);
          say(
            `fairness ${fairness}, round ${r}, ${name}: victim p99 ${result.victim.loaded.p99_ms} ms (${result.p99_ratio.toFixed(2)}× this round's solo), ` +
              `rps ${result.rps_ratio.toFixed(2)}× this round's solo; aggressor admitted ${result.aggressor.admitted}, refused ${result.aggressor.refused}; ` +
              `lag pauses: aggressor ${result.lag_pauses.aggressor}, victim ${result.lag_pauses.victim}`,
          );
          if (name !== CONTROL) await freshZtunnel(mesh, server, rate, seconds);
        }
        await settle(mesh, say);
        const after = await victim(mesh, server, rate, seconds);
        solos.push(after);
        say(
          `fairness ${fairness}, round ${r}: victim solo again: p50 ${after.p50_ms} ms, p99 ${after.p99_ms} ms`,
        );
      }
      // A single solo run can be an outlier (host noise has read 53-105 ms where 11 ms is
      // usual), which made a whole round's ratios 0.1x or 5x: every loaded run is divided by
      // the lower median of this setting's solo runs instead, two per round (before and
      // after its attacks). Lower: the noise only ever slows a run down, and one run had
      // three noisy solo runs of six (fairness off: 53, 23, 96, 11.6, 11.5, 10.7 ms), where
      // the upper median took 23 ms. It makes every ratio larger, never smaller, than the
      // upper median would.
      const reference = lowerMedianStats(solos);
      soloRuns[fairness] = { runs: solos, reference };
      say(
        `fairness ${fairness}: solo reference (lower median of ${solos.length}): p50 ${reference.p50_ms} ms, p99 ${reference.p99_ms} ms, ${reference.rps} req/s`,
      );
      for (const name of names) {
        const rebased = rounds.get(name)!.map((round) => against(round, reference));
        scenarios.push({ ...summarize(name, fairness, rebased), workers: opts.workers ?? 1 });
      }
    } finally {
      await mesh.down();
    }
  }
  return { scenarios, capacityRps, solo: soloRuns };
}

/**
 * A fresh ztunnel is still compiling and growing its heap: a solo run straight after
 * start-up had a p99 up to 5x a warm one, which flattered every ratio against it.
 */
async function warmUp(mesh: LocalMesh, server: string, rate: number, seconds: number): Promise<void> {
  await victim(mesh, server, rate, Math.min(2, seconds));
}

/**
 * Restarts ztunnel (the pods are re-enrolled, as a node agent does) and warms it up, so
 * that the next run measures its own attack or none, not the last one's aftermath. Without
 * fairness an attack leaves ztunnel at 550-710 MB RSS: once CPU had settled, the solo runs
 * after a hoard still read 89-93 ms p99 against 10-11 ms (the collector's pauses over the
 * big heap), and an attack that followed another one read against that bloated process.
 */
async function freshZtunnel(mesh: LocalMesh, server: string, rate: number, seconds: number): Promise<void> {
  await mesh.restartZtunnel('node-a');
  await mesh.waitReady();
  await warmUp(mesh, server, rate, seconds);
}

async function startServers(mesh: LocalMesh): Promise<void> {
  for (const name of ['victim-server', 'aggressor-server']) {
    const nice = name === 'aggressor-server' ? AGGRESSOR_NICE : [];
    const argv = [...nice, 'taskset', '-c', LOAD_CPU, 'node', '-e', SERVERS];
    const proc = mesh.cluster.runInPod(mesh.pod(name), argv, {
      reject: false,
      stdout: 'pipe',
    });
    await new Promise<void>((resolve) => proc.stdout?.once('data', () => resolve()));
  }
}

/**
 * Unmeasured load before each victim run (see VICTIM): long enough in a full run for the
 * generator's own start-up to be over (the p99 of the second after the first still read
 * 12.2-15.5 ms against 10.9-12.2 ms from the third on); in `--quick` the worst quarter
 * second only, so that the run stays within its CI budget.
 */
function warmupMs(seconds: number): number {
  return seconds >= 10 ? 2000 : 500;
}

/**
 * How long an attack runs before the victim's measured window opens: its steady state is
 * what the verdict judges. Its first quarter second is a transient of its own (a flood's
 * 32 streams or 64 slow readers filling their windows and socket buffers at once put
 * 91-113 of the victim's requests above its p99 in that window, at up to 71 ms).
 */
const ATTACK_LEAD_MS = 1000;

async function victim(mesh: LocalMesh, host: string, rate: number, seconds: number): Promise<VictimStats> {
  const warmup = warmupMs(seconds);
  const r = await mesh.cluster.exec(
    mesh.pod('victim'),
    [
      'taskset',
      '-c',
      LOAD_CPU,
      'node',
      '-e',
      VICTIM,
      host,
      String(rate),
      String(seconds * 1000),
      '16',
      String(warmup),
    ],
    { timeoutMs: warmup + seconds * 1000 + 20_000 },
  );
  const line = JSON.parse(r.stdout.trim().split('\n').pop() || '{}') as Partial<VictimStats>;
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    p50_ms: round(line.p50_ms ?? 5000),
    p99_ms: round(line.p99_ms ?? 5000),
    rps: round(line.rps ?? 0),
  };
}

/**
 * The runs' lower median latencies and upper median rate, so that every ratio against
 * them errs towards the attack looking worse.
 */
function lowerMedianStats(runs: VictimStats[]): VictimStats {
  const low = (field: 'p50_ms' | 'p99_ms') => lowerMedianBy(runs, (r) => r[field])[field];
  return { p50_ms: low('p50_ms'), p99_ms: low('p99_ms'), rps: upperMedianBy(runs, (r) => r.rps).rps };
}

function ratios(loaded: VictimStats, solo: VictimStats): { p99_ratio: number; rps_ratio: number } {
  return {
    p99_ratio: loaded.p99_ms / Math.max(1, solo.p99_ms),
    rps_ratio: loaded.rps / Math.max(1e-9, solo.rps),
  };
}

/** A round's ratios against the solo reference. */
function against(round: RoundResult, solo: VictimStats): RoundResult {
  const { loaded } = round.victim;
  return { ...round, victim: { solo, loaded }, ...ratios(loaded, solo) };
}

/** The median round by p99 ratio (the upper of two middles), with the peak RSS of all. */
function summarize(
  name: Scenario | typeof CONTROL,
  fairness: 'on' | 'off',
  rounds: RoundResult[],
): Omit<ScenarioResult, 'workers'> {
  const median = upperMedianBy(rounds, (r) => r.p99_ratio);
  const rss_mb = Math.max(...rounds.map((r) => r.ztunnel.rss_mb));
  return { name, fairness, ...median, ztunnel: { ...median.ztunnel, rss_mb }, rounds };
}

async function scenario(
  mesh: LocalMesh,
  name: Scenario | typeof CONTROL,
  rate: number,
  seconds: number,
  solo: VictimStats,
): Promise<RoundResult> {
  const pid = mesh.ztunnelPid('node-a');
  const cpuBefore = pid ? processCpuSecondsSync(pid) : 0;
  const pausesBefore = await lagPauses(mesh);
  let rssMax = 0;
  const sampler = setInterval(() => {
    if (pid) rssMax = Math.max(rssMax, residentSetSync(pid).rss / 2 ** 20);
  }, 200);
  const aggressorHost = mesh.pod('aggressor-server').ipv4;
  const startAttack = () =>
    mesh.cluster.exec(
      mesh.pod('aggressor'),
      [
        ...AGGRESSOR_NICE,
        'taskset',
        '-c',
        LOAD_CPU,
        'node',
        '-e',
        AGGRESSOR,
        name,
        aggressorHost,
        String(ATTACK_LEAD_MS + seconds * 1000 + 500),
      ],
      { timeoutMs: ATTACK_LEAD_MS + seconds * 1000 + 20_000 },
    );
  // The attack starts ATTACK_LEAD_MS before the victim's measured window: during the
  // victim's warm-up when that is long enough, else before the victim starts.
  const warmup = warmupMs(seconds);
  const after = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
  const attack = after(warmup - ATTACK_LEAD_MS).then(startAttack);
  const measured = after(ATTACK_LEAD_MS - warmup).then(() =>
    victim(mesh, mesh.pod('victim-server').ipv4, rate, seconds),
  );
  const loaded = await measured;
  const agg = JSON.parse((await attack).stdout.trim().split('\n').pop() || '{}') as {
    admitted?: number;
    refused?: number;
  };
  clearInterval(sampler);
  const pausesAfter = await lagPauses(mesh);
  return {
    victim: { solo, loaded },
    round_solo: solo,
    ...ratios(loaded, solo),
    aggressor: { admitted: agg.admitted ?? 0, refused: agg.refused ?? 0 },
    ztunnel: { cpu_s: pid ? processCpuSecondsSync(pid) - cpuBefore : 0, rss_mb: rssMax },
    lag_pauses: {
      aggressor: pausesAfter.aggressor - pausesBefore.aggressor,
      victim: pausesAfter.victim - pausesBefore.victim,
    },
  };
}

/** The two tenants' lag pauses so far, from node-a's merged /metrics (0 when unreadable). */
async function lagPauses(mesh: LocalMesh): Promise<{ aggressor: number; victim: number }> {
  const text = await mesh.metrics('node-a').catch(() => '');
  const of = (tenant: string) => {
    let sum = 0;
    for (const line of text.split('\n'))
      if (
        line.startsWith('zmesh_tenant_read_pauses_total{') &&
        line.includes(`tenant="${tenant}"`) &&
        line.includes('reason="lag"')
      )
        sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
    return sum;
  };
  return { aggressor: of('aggressor'), victim: of('victim') };
}

/** ztunnel below this share of a CPU is done with the previous run's connections. */
const SETTLED_CPU = 0.05;
const SETTLE_SAMPLE_MS = 500;
const SETTLE_MAX_MS = 30_000;

/**
 * Waits until ztunnel is idle before a measurement starts. An attack's aftermath (thousands
 * of hoarded connections closing, a flood's or slow readers' buffers draining) kept it busy
 * for seconds after the aggressor exited, and the next solo run measured that: solo p99
 * 132-234 ms after a hoard where 12-22 ms is usual.
 */
async function settle(mesh: LocalMesh, say: (line: string) => void): Promise<void> {
  const pid = mesh.ztunnelPid('node-a');
  if (!pid) return;
  const started = Date.now();
  for (;;) {
    const before = processCpuSecondsSync(pid);
    await new Promise((r) => setTimeout(r, SETTLE_SAMPLE_MS));
    const share = (processCpuSecondsSync(pid) - before) / (SETTLE_SAMPLE_MS / 1000);
    if (share < SETTLED_CPU) break;
    if (Date.now() - started > SETTLE_MAX_MS) {
      say(
        `ztunnel still at ${(share * 100).toFixed(0)}% CPU after ${SETTLE_MAX_MS / 1000} s: measuring anyway`,
      );
      return;
    }
  }
  const waited = Date.now() - started;
  if (waited > 2 * SETTLE_SAMPLE_MS) say(`ztunnel settled after ${(waited / 1000).toFixed(1)} s`);
}
