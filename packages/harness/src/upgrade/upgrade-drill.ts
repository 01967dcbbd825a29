import { readFileSync } from 'node:fs';
import type { ResultPromise } from 'execa';
import { startMesh } from '../mesh/mesh.js';
import { STEADY_SERVER } from '../outage/steady-traffic.js';
import { UPGRADE_CLIENT, type UpgradeTrafficResult } from './upgrade-traffic.js';

const PORT = 8080;

export interface UpgradeDrillOptions {
  /** Long-lived connections held through both upgrades (default 5). */
  longLived?: number;
  /**
   * How long the client runs at least (default 12 s); it runs on until 1 s after the last
   * upgrade's overlap, however long the successors take to be ready.
   */
  durationMs?: number;
  /** How long each old ztunnel is watched after SIGTERM before the next node (default 1.5 s). */
  overlapMs?: number;
  echo?: (line: string) => void;
}

export interface NodeUpgrade {
  node: string;
  /** The old process was still running `overlapMs` after its SIGTERM (it held connections). */
  servedWhileDraining: boolean;
  /** Its zmesh_drain_connections lines at that moment. */
  draining: string;
  /**
   * Processes (by process_start_time_seconds) that answered on the node's one metrics port
   * during the overlap (the old one, draining, keeps it): 2 when both serve it (SO_REUSEPORT).
   */
  metricsServedBy: number;
  /** RSS (kB) of the old and the new ztunnel's process trees during the overlap. */
  rssKb: { old: number; new: number };
  /** ms from the client ending its long-lived connections to the old process's exit (negative: before). */
  exitedAfterMs: number | undefined;
  exitCode: number | undefined;
}

export interface UpgradeDrillReport {
  traffic: UpgradeTrafficResult;
  nodes: NodeUpgrade[];
  /** Every target met: 0 refused, 0 broken, each old process gone only after its last connection. */
  passed: boolean;
}

/**
 * The ztunnel upgrade drill (docs/upgrade.md) on a fresh two-node local mesh (root, BPF):
 * while a client pod on node-a opens a connection every 50 ms and holds long-lived ones
 * pinging every 100 ms to a pod on node-b, node-b's ztunnel and then node-a's are replaced
 * (a successor starts, the old one gets SIGTERM and drains).
 */
export async function runUpgradeDrill(opts: UpgradeDrillOptions = {}): Promise<UpgradeDrillReport> {
  const longLived = opts.longLived ?? 5;
  const durationMs = opts.durationMs ?? 12_000;
  const overlapMs = opts.overlapMs ?? 1500;
  const say = opts.echo ?? (() => {});
  const echo = (line: string) => say(`${new Date().toISOString()} ${line}`);
  const children: ResultPromise[] = [];
  const mesh = await startMesh({
    run: 'cluster',
    spec: {
      nodes: ['node-a', 'node-b'],
      pods: [
        { name: 'client', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
        { name: 'server', namespace: 'team-b', serviceAccount: 'server', node: 'node-b' },
      ],
      services: [],
    },
  });
  try {
    const server = mesh.pod('server');
    const srv = mesh.cluster.runInPod(server, ['node', '-e', STEADY_SERVER, String(PORT)], {
      reject: false,
      stdout: 'pipe',
    });
    children.push(srv);
    await new Promise<void>((resolve) => srv.stdout?.once('data', () => resolve()));
    await mesh.waitReady();
    const client = mesh.cluster.runInPod(
      mesh.pod('client'),
      // A cap far beyond durationMs: the drill says `stop` once both upgrades are done.
      [
        'node',
        '-e',
        UPGRADE_CLIENT,
        server.ipv4,
        String(PORT),
        String(durationMs + 120_000),
        String(longLived),
      ],
      { reject: false, stdout: 'pipe', stdin: 'pipe' },
    );
    children.push(client);
    const clientStarted = Date.now();
    await new Promise((r) => setTimeout(r, 1500));

    const olds: Array<{ node: string; old: ResultPromise; exitedAt: number; report: NodeUpgrade }> = [];
    for (const node of ['node-b', 'node-a']) {
      echo(`${node}: starting a successor ztunnel`);
      const { old } = await mesh.startSuccessor(node);
      const entry = {
        node,
        old,
        exitedAt: 0,
        report: {
          node,
          servedWhileDraining: false,
          draining: '',
          rssKb: { old: treeRssKb(old.pid), new: treeRssKb(mesh.ztunnelPid(node)) },
          metricsServedBy: 0,
          exitedAfterMs: undefined,
          exitCode: undefined,
        } as NodeUpgrade,
      };
      void old.finally(() => {
        entry.exitedAt = Date.now();
      });
      olds.push(entry);
      echo(`${node}: SIGTERM to the old ztunnel (pid ${old.pid}); it drains`);
      if (old.pid !== undefined) process.kill(old.pid, 'SIGTERM');
      await new Promise((r) => setTimeout(r, overlapMs));
      entry.report.servedWhileDraining = entry.exitedAt === 0;
      // Both processes answer the metrics port: the old one is the one with a drain under way.
      const answers = await mesh.metricsOfEach(node);
      entry.report.metricsServedBy = answers.size;
      const draining = [...answers.values()].find((b) => /^zmesh_drain_connections\{.*\} [1-9]/m.test(b));
      entry.report.draining = (draining?.match(/^zmesh_drain_connections.*$/gm) ?? []).join(', ');
      echo(`${node}: old ztunnel draining: ${entry.report.draining || 'gone'}`);
    }

    await new Promise((r) => setTimeout(r, Math.max(1000, clientStarted + durationMs - Date.now())));
    client.stdin?.end('stop\n');
    const r = await client;
    const traffic = JSON.parse(String(r.stdout).trim().split('\n').pop() ?? '{}') as UpgradeTrafficResult;
    for (const o of olds) {
      const result = await Promise.race([
        o.old,
        new Promise<undefined>((res) => setTimeout(() => res(undefined), 5000)),
      ]);
      o.report.exitCode = result?.exitCode;
      o.report.exitedAfterMs = o.exitedAt ? o.exitedAt - traffic.endedAt : undefined;
    }
    const nodes = olds.map((o) => o.report);
    const passed =
      traffic.newOk > 0 &&
      traffic.newFailed === 0 &&
      traffic.liveBroken === 0 &&
      nodes.every(
        (n) =>
          n.servedWhileDraining &&
          n.metricsServedBy === 2 &&
          n.exitCode === 0 &&
          (n.exitedAfterMs ?? -1) >= 0,
      );
    return { traffic, nodes, passed };
  } finally {
    for (const c of children) c.kill('SIGKILL');
    await mesh.down();
  }
}

/** RSS (kB) of a process and its descendants (bin/zmesh's wrapper included); 0 when gone. */
function treeRssKb(pid: number | undefined): number {
  if (pid === undefined) return 0;
  let kb = 0;
  try {
    kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
    for (const child of readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean))
      kb += treeRssKb(Number(child));
  } catch {
    // The process ended meanwhile.
  }
  return kb;
}
