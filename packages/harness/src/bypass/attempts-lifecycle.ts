import type { PodInfo } from '../cluster/topology.js';
import { parseRateResult, RATE_CLIENT, type RateResult } from '../mesh/pod-programs.js';
import type { Attempt, Outcome } from './attempt.js';
import { DROP_TIMEOUT_MS } from './attempts-direct.js';
import { APP_PORT, type BypassLab } from './bypass-lab.js';
import { combine, judgeProbes } from './judge.js';
import { moved } from './metric-deltas.js';

/** Connection attempts per loop and their rate: the loop spans the enrollment or restart it watches. */
const LOOP = { count: 40, perSecond: 20, timeoutMs: 700 };
const RESTART_LOOP = { count: 160, perSecond: 40, timeoutMs: 700 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Enrollment edges and ztunnel restarts. They run last: they enroll and remove the late
 * pod and restart both ztunnels.
 */
export function lifecycleAttempts(): Attempt[] {
  return [
    {
      id: 'lifecycle/before-enrollment-ack',
      description:
        'a pod sending while its enrollment is in flight (before, during and after the acknowledgement)',
      expected: 'captured',
      alsoAccepted: ['denied'],
      run: beforeAck,
    },
    {
      id: 'lifecycle/after-removal',
      description: 'a pod sending after it was removed from the mesh (capture detached) to enrolled pods',
      expected: 'denied',
      run: afterRemoval,
    },
    {
      id: 'lifecycle/source-ztunnel-restart',
      description: "an enrolled pod sending while its own node's ztunnel restarts (capture stays pinned)",
      expected: 'captured',
      alsoAccepted: ['denied'],
      run: (lab) => duringRestart(lab, 'node-a', [lab.pod('attacker')]),
    },
    {
      id: 'lifecycle/destination-ztunnel-restart',
      description:
        "an enrolled pod and a pod outside the mesh sending while the destination node's ztunnel restarts",
      expected: 'denied',
      alsoAccepted: ['captured'],
      run: (lab) => duringRestart(lab, 'node-b', [lab.pod('attacker'), lab.pod('outsider')]),
    },
  ];
}

function loop(lab: BypassLab, pod: PodInfo, shape: typeof LOOP): Promise<RateResult> {
  const args = [
    lab.pod('server').ipv4,
    String(APP_PORT),
    String(shape.count),
    String(shape.perSecond),
    String(shape.timeoutMs),
  ];
  const budget = (shape.count / shape.perSecond) * 1000 + shape.timeoutMs + 10_000;
  return lab.mesh.cluster
    .exec(pod, ['node', '-e', RATE_CLIENT, ...args], { timeoutMs: budget })
    .then((r) => parseRateResult(r.stdout));
}

function judgeLoop(who: string, r: RateResult): Outcome {
  const evidence = [
    `${who}: ${r.ok} answered, ${r.failed} failed ${JSON.stringify(r.errors)}${r.ok ? ` answers ${JSON.stringify(r.answers)}` : ''}`,
  ];
  return { observed: r.ok > 0 ? 'delivered' : 'denied', evidence };
}

async function beforeAck(lab: BypassLab): Promise<Outcome> {
  const late = lab.pod('late');
  const running = loop(lab, late, LOOP);
  await sleep(600);
  const started = Date.now();
  await lab.mesh.enroll(late);
  const ackAt = Date.now() - started;
  const o = judgeLoop('late pod', await running);
  const moves = await lab.moves();
  const pending = moved(moves, 'zmesh_capture_refused_total', 'pending_config');
  const drops = moved(moves, 'zmesh_capture_inbound_drops', 'server');
  o.evidence.push(`enrollment acknowledged after ${ackAt} ms, 600 ms into the loop`);
  o.evidence.push(
    `before: ${drops} packet(s) dropped by strict inbound at server; after: ${pending} refused by ztunnel as pending_config`,
  );
  if (o.observed !== 'delivered' && pending > 0) o.observed = 'captured';
  return o;
}

async function afterRemoval(lab: BypassLab): Promise<Outcome> {
  const late = lab.pod('late');
  await lab.mesh.unenroll(late);
  const dump = JSON.parse((await lab.mesh.admin('node-a', 15000, '/config_dump')).body) as {
    enrolled?: string[];
  };
  const targets = [
    { host: lab.pod('server').ipv4, port: APP_PORT },
    { host: lab.pod('neighbor').ipv4, port: APP_PORT },
    { host: lab.pod('sink').ipv6, port: APP_PORT },
  ];
  const o = judgeProbes(await lab.probe(late, targets, DROP_TIMEOUT_MS), await lab.moves(), 'node-a');
  o.evidence.push(
    `node-a enrolled after removal: ${(dump.enrolled ?? []).includes(late.uid) ? 'STILL ENROLLED' : 'late pod gone'}`,
  );
  return o;
}

async function duringRestart(lab: BypassLab, node: string, pods: PodInfo[]): Promise<Outcome> {
  const loops = pods.map((p) => loop(lab, p, RESTART_LOOP));
  await sleep(500);
  const started = Date.now();
  await lab.mesh.restartZtunnel(node);
  await lab.mesh.waitReady();
  const restartMs = Date.now() - started;
  const results = await Promise.all(loops);
  const o = combine(...results.map((r, i) => judgeLoop(pods[i]!.name, r)));
  o.evidence.push(
    `${node}'s ztunnel restarted and ready again in ${restartMs} ms, inside the ${RESTART_LOOP.count / RESTART_LOOP.perSecond} s loop`,
  );
  const moves = await lab.moves();
  if (
    o.observed === 'denied' &&
    moved(
      moves.filter((m) => m.node === 'node-a'),
      'istio_tcp_connections_opened_total',
      'reporter="source"',
    ) > 0
  )
    o.observed = 'captured';
  return o;
}
