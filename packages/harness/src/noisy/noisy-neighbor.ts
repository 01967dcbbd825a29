import { readFileSync } from 'node:fs';
import type { PodInfo } from '../cluster/topology.js';
import { LocalMesh } from '../mesh/local-mesh.js';
import { AGGRESSOR, SERVERS, VICTIM } from './noisy-programs.js';

export const SCENARIOS = ['storm', 'flood', 'slow', 'hoard'] as const;
export type Scenario = (typeof SCENARIOS)[number];

export interface VictimStats {
  p50_ms: number;
  p99_ms: number;
  rps: number;
}

export interface ScenarioResult {
  name: Scenario;
  fairness: 'on' | 'off';
  victim: { solo: VictimStats; loaded: VictimStats };
  p99_ratio: number;
  rps_ratio: number;
  aggressor: { admitted: number; refused: number };
  ztunnel: { cpu_s: number; rss_mb: number };
}

export interface NoisyOptions {
  quick?: boolean;
  /** Only these scenarios (default: all), e.g. to iterate on one attack. */
  scenarios?: readonly Scenario[];
  /** Only these fairness settings (default: on, then off). */
  fairness?: readonly ('on' | 'off')[];
  progress?: (line: string) => void;
}

/** Load generators run here; the node's ztunnel alone on the other CPU (PROXY_CPU). */
export const LOAD_CPU = '1';
/**
 * The aggressor's client and server share the load CPU with the victim's client at a
 * lower priority (nice 10): they get what the victim leaves, and the victim's latency is
 * ztunnel's, not its own generator's wait for the CPU. At nice 0, a storm refused by its
 * quota looped faster, starved the victim's generator and showed up as victim latency.
 */
const AGGRESSOR_NICE = ['nice', '-n', '10'];
export const PROXY_CPU = '0';
const CLOCK_TICKS = 100;

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
): Promise<{ scenarios: ScenarioResult[]; capacityRps: number }> {
  const say = opts.progress ?? (() => {});
  const seconds = opts.quick ? 3 : 10;
  const scenarios: ScenarioResult[] = [];
  let capacityRps = 0;
  for (const fairness of opts.fairness ?? (['on', 'off'] as const)) {
    say(
      `fairness ${fairness}: bringing up the mesh (ztunnel on CPU ${PROXY_CPU}; load on CPU ${LOAD_CPU}, the aggressor's at nice 10)`,
    );
    const mesh = await LocalMesh.up(SPEC, {
      ztunnelCpus: PROXY_CPU,
      ztunnelArgs: fairness === 'on' ? [] : ['--fairness', 'off'],
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
      // A fresh ztunnel is still compiling and growing its heap: a solo run straight after
      // start-up had a p99 up to 5x a warm one, which flattered every ratio against it.
      await victim(mesh, server, rate, Math.min(3, seconds));
      const solo = await victim(mesh, server, rate, seconds);
      say(`fairness ${fairness}: victim solo at ${rate} req/s: p50 ${solo.p50_ms} ms, p99 ${solo.p99_ms} ms`);
      for (const name of opts.scenarios ?? SCENARIOS) {
        const result = await scenario(mesh, name, rate, seconds, solo);
        scenarios.push({ ...result, fairness });
        say(
          `fairness ${fairness}, ${name}: victim p99 ${result.victim.loaded.p99_ms} ms (${result.p99_ratio.toFixed(2)}× solo), ` +
            `rps ${result.rps_ratio.toFixed(2)}× solo; aggressor admitted ${result.aggressor.admitted}, refused ${result.aggressor.refused}`,
        );
      }
    } finally {
      await mesh.down();
    }
  }
  return { scenarios, capacityRps };
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

async function victim(mesh: LocalMesh, host: string, rate: number, seconds: number): Promise<VictimStats> {
  const r = await mesh.cluster.exec(
    mesh.pod('victim'),
    ['taskset', '-c', LOAD_CPU, 'node', '-e', VICTIM, host, String(rate), String(seconds * 1000), '16'],
    { timeoutMs: seconds * 1000 + 20_000 },
  );
  const line = JSON.parse(r.stdout.trim().split('\n').pop() || '{}') as Partial<VictimStats>;
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    p50_ms: round(line.p50_ms ?? 5000),
    p99_ms: round(line.p99_ms ?? 5000),
    rps: round(line.rps ?? 0),
  };
}

async function scenario(mesh: LocalMesh, name: Scenario, rate: number, seconds: number, solo: VictimStats) {
  const pid = mesh.ztunnelPid('node-a');
  const cpuBefore = pid ? cpuSeconds(pid) : 0;
  let rssMax = 0;
  const sampler = setInterval(() => {
    if (pid) rssMax = Math.max(rssMax, rssMb(pid));
  }, 200);
  const aggressorHost = mesh.pod('aggressor-server').ipv4;
  const attack = mesh.cluster.exec(
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
      String((seconds + 1.5) * 1000),
    ],
    { timeoutMs: seconds * 1000 + 20_000 },
  );
  await new Promise((r) => setTimeout(r, 1000));
  const loaded = await victim(mesh, mesh.pod('victim-server').ipv4, rate, seconds);
  const agg = JSON.parse((await attack).stdout.trim().split('\n').pop() || '{}') as {
    admitted?: number;
    refused?: number;
  };
  clearInterval(sampler);
  return {
    name,
    victim: { solo, loaded },
    p99_ratio: loaded.p99_ms / Math.max(1, solo.p99_ms),
    rps_ratio: loaded.rps / Math.max(1e-9, solo.rps),
    aggressor: { admitted: agg.admitted ?? 0, refused: agg.refused ?? 0 },
    ztunnel: { cpu_s: pid ? cpuSeconds(pid) - cpuBefore : 0, rss_mb: rssMax },
  };
}

function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

export type { PodInfo };
