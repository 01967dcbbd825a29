import { writeFile } from 'node:fs/promises';
import { startMesh } from '../mesh/mesh.js';
import { ECHO_SERVER, SETUP_AND_RTT } from '../mesh/pod-programs.js';

export interface CaptureBenchRow {
  path: 'direct pod-to-pod' | 'captured (zmesh)';
  connPerSec: number;
  rttP50Us: number;
  rttP99Us: number;
  failed: number;
}

const LOAD_CPU = '1';

/**
 * Issue 3's reading: connection setup rate and one-connection request/response latency,
 * captured path vs direct pod-to-pod, in one run on one cluster. The direct pair is two
 * pods that are not enrolled (no capture, no strict inbound); the captured pair is
 * enrolled; both cross nodes. ztunnels on CPU 0, load on CPU 1.
 */
export async function runCaptureBench(
  opts: { quick?: boolean; json?: string } = {},
): Promise<CaptureBenchRow[]> {
  const count = opts.quick ? 500 : 3000;
  const rounds = opts.quick ? 500 : 5000;
  const mesh = await startMesh({
    run: 'cluster',
    spec: {
      nodes: ['node-a', 'node-b'],
      pods: [
        { name: 'mesh-client', namespace: 'bench', serviceAccount: 'client', node: 'node-a' },
        { name: 'mesh-server', namespace: 'bench', serviceAccount: 'server', node: 'node-b' },
        { name: 'plain-client', namespace: 'plain', serviceAccount: 'client', node: 'node-a' },
        { name: 'plain-server', namespace: 'plain', serviceAccount: 'server', node: 'node-b' },
      ],
    },
    enroll: (p) => p.namespace === 'bench',
    ztunnelCpus: '0',
    ztunnelLog: 'error',
  });
  try {
    const rows: CaptureBenchRow[] = [];
    for (const [path, client, server] of [
      ['direct pod-to-pod', 'plain-client', 'plain-server'],
      ['captured (zmesh)', 'mesh-client', 'mesh-server'],
    ] as const) {
      const proc = mesh.cluster.runInPod(
        mesh.pod(server),
        ['taskset', '-c', LOAD_CPU, 'node', '-e', ECHO_SERVER, '7000'],
        {
          reject: false,
          stdout: 'pipe',
        },
      );
      await new Promise<void>((resolve) => proc.stdout?.once('data', () => resolve()));
      const r = await mesh.cluster.exec(
        mesh.pod(client),
        [
          'taskset',
          '-c',
          LOAD_CPU,
          'node',
          '-e',
          SETUP_AND_RTT,
          mesh.pod(server).ipv4,
          '7000',
          String(count),
          '16',
          String(rounds),
        ],
        { timeoutMs: 120_000 },
      );
      proc.kill('SIGKILL');
      const line = JSON.parse(r.stdout.trim().split('\n').pop() || '{}') as Omit<CaptureBenchRow, 'path'>;
      rows.push({ path, ...line });
    }
    if (opts.json) await writeFile(opts.json, `${JSON.stringify({ rows }, null, 2)}\n`);
    return rows;
  } finally {
    await mesh.down();
  }
}

export function captureTable(rows: CaptureBenchRow[]): string {
  const direct = rows.find((r) => r.path === 'direct pod-to-pod');
  const lines = [['path', 'conn/s', 'vs direct', 'rtt p50 µs', 'rtt p99 µs', 'added p50 µs']];
  for (const r of rows) {
    lines.push([
      r.path,
      r.connPerSec.toFixed(0),
      direct ? `${(r.connPerSec / direct.connPerSec).toFixed(2)}×` : '-',
      r.rttP50Us.toFixed(0),
      r.rttP99Us.toFixed(0),
      direct ? (r.rttP50Us - direct.rttP50Us).toFixed(0) : '-',
    ]);
  }
  const w = lines[0]!.map((_, i) => Math.max(...lines.map((l) => l[i]!.length)));
  return lines.map((l) => l.map((c, i) => c.padEnd(w[i]!)).join('  ')).join('\n');
}
