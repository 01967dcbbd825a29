import { readdirSync } from 'node:fs';
import { startMesh } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { execa } from 'execa';

/**
 * Enrolment churn: 50 pods enrolled and removed 5 times over ZDS.
 * Nothing may grow: ztunnel's file descriptors, BPF programs, maps, pins.
 */
const unavailable = await BpfCapture.unavailableReason();
const PODS = 50;
const ROUNDS = 5;

async function bpfCounts(): Promise<{ progs: number; maps: number }> {
  const count = async (what: string) => {
    const r = await execa('bpftool', ['-j', what, 'show'], { reject: false });
    return (JSON.parse(r.stdout || '[]') as Array<{ name?: string }>).filter((x) => x.name?.startsWith('zm_'))
      .length;
  };
  return { progs: await count('prog'), maps: await count('map') };
}

/** Every pin (programs, maps, links) under this run's scope, counted recursively. */
function pins(scope: string): number {
  try {
    return readdirSync(`/sys/fs/bpf/zmesh/${scope}`, { recursive: true }).length;
  } catch {
    return 0;
  }
}

(unavailable ? test.skip : test)(
  unavailable
    ? `enrolment churn skipped: ${unavailable}`
    : `enrol and remove ${PODS} pods ${ROUNDS} times: nothing grows`,
  async (t) => {
    const mesh = await startMesh({
      run: 'cluster',
      spec: {
        nodes: ['node-a'],
        pods: Array.from({ length: PODS }, (_, i) => ({
          name: `churn-${i}`,
          namespace: 'churn',
          serviceAccount: 'churn',
          node: 'node-a',
        })),
      },
      enroll: () => false,
    });
    try {
      const pid = mesh.ztunnelPid('node-a')!;
      const fds = () => readdirSync(`/proc/${pid}/fd`).length;
      const samples: Array<{ fds: number; progs: number; maps: number; pins: number }> = [];
      for (let round = 0; round < ROUNDS; round++) {
        for (const pod of mesh.cluster.pods) await mesh.enroll(pod);
        await mesh.waitReady(30_000);
        for (const pod of mesh.cluster.pods) await mesh.unenroll(pod);
        await new Promise((r) => setTimeout(r, 200));
        samples.push({ fds: fds(), ...(await bpfCounts()), pins: pins(mesh.captureScope('node-a')) });
      }
      t.log(samples.map((s, i) => `round ${i + 1}: ${JSON.stringify(s)}`).join('\n'));
      const first = samples[0]!;
      const last = samples.at(-1)!;
      t.true(last.fds <= first.fds, `fds ${first.fds} → ${last.fds}`);
      t.is(last.progs, first.progs);
      t.is(last.maps, first.maps);
      t.is(last.pins, 0, 'no pins left once every pod is removed');
    } finally {
      await mesh.down();
    }
  },
);
