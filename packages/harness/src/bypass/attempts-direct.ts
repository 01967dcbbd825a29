import { execa } from 'execa';
import type { PodInfo } from '../cluster/topology.js';
import type { Attempt, Expected, Outcome } from './attempt.js';
import { APP_PORT, type BypassLab } from './bypass-lab.js';
import { combine, judgeProbes } from './judge.js';

/** A dropped SYN is only seen as a timeout: long enough for a cross-node handshake, short for the suite. */
export const DROP_TIMEOUT_MS = 1200;

type Family = 'IPv4' | 'IPv6' | 'IPv4-mapped';
const FAMILIES: readonly Family[] = ['IPv4', 'IPv6', 'IPv4-mapped'];

export function addressOf(pod: PodInfo, family: Family): string {
  if (family === 'IPv4') return pod.ipv4;
  if (family === 'IPv6') return pod.ipv6;
  return `::ffff:${pod.ipv4}`;
}

interface Source {
  id: string;
  what: string;
  target: string;
  expected: Expected;
  /** Runs the probe; returns the node whose ztunnel would capture it, if any. */
  from: (lab: BypassLab) => { pod?: PodInfo; node: string };
}

const SOURCES: readonly Source[] = [
  {
    id: 'enrolled-same-node',
    what: 'an enrolled pod to a pod on its own node',
    target: 'neighbor',
    expected: 'captured',
    from: (lab) => ({ pod: lab.pod('attacker'), node: 'node-a' }),
  },
  {
    id: 'enrolled-other-node',
    what: 'an enrolled pod to a pod on another node',
    target: 'server',
    expected: 'captured',
    from: (lab) => ({ pod: lab.pod('attacker'), node: 'node-a' }),
  },
  {
    id: 'non-enrolled',
    what: 'a pod outside the mesh to an enrolled pod on another node',
    target: 'server',
    expected: 'denied',
    from: (lab) => ({ pod: lab.pod('outsider'), node: 'node-a' }),
  },
  {
    id: 'node-netns',
    what: "node-a's own network namespace (root, not a pod) to a pod on node-b",
    target: 'server',
    expected: 'denied',
    from: () => ({ node: 'node-a' }),
  },
];

/** Direct TCP to the application port of a pod the attacker may not reach: every source × family. */
export function directTcpAttempts(): Attempt[] {
  const matrix = SOURCES.flatMap((s) =>
    FAMILIES.map(
      (f): Attempt => ({
        id: `direct-tcp/${s.id}/${f.toLowerCase()}`,
        description: `direct TCP over ${f} from ${s.what}, to its application port ${APP_PORT}`,
        expected: s.expected,
        run: (lab) => directProbe(lab, s, f),
      }),
    ),
  );
  return [
    ...matrix,
    {
      id: 'direct-tcp/link-local-same-node/ipv6',
      description:
        "direct TCP to a same-node pod's IPv6 link-local address (fe80::/10 on the shared bridge), enrolled and not",
      expected: 'denied',
      alsoAccepted: ['captured'],
      run: linkLocal,
    },
    {
      id: 'direct-tcp/non-enrolled-same-node/ipv4',
      description: 'direct TCP over IPv4 from a pod outside the mesh to an enrolled pod on the same node',
      expected: 'denied',
      run: (lab) => directProbe(lab, { ...SOURCES[2]!, target: 'neighbor' }, 'IPv4'),
    },
    {
      id: 'direct-tcp/node-netns-local-pod/ipv4',
      description:
        "direct TCP over IPv4 from node-b's own namespace to a pod on node-b (a kubelet's position)",
      expected: 'denied',
      run: (lab) => directProbe(lab, { ...SOURCES[3]!, from: () => ({ node: 'node-b' }) }, 'IPv4'),
    },
  ];
}

/** The pod's link-local address, read as root from the node side (pods cannot be asked). */
async function linkLocalOf(pod: PodInfo): Promise<string | undefined> {
  const r = await execa('ip', ['-n', pod.netns, '-6', '-o', 'addr', 'show', 'dev', 'eth0', 'scope', 'link'], {
    reject: false,
  });
  return /inet6 (fe80::[0-9a-f:]+)\//.exec(String(r.stdout))?.[1];
}

async function linkLocal(lab: BypassLab): Promise<Outcome> {
  const ll = await linkLocalOf(lab.pod('neighbor'));
  if (!ll)
    return { observed: 'denied', evidence: ['the target pod has no link-local address: nothing to reach'] };
  const targets = [{ host: `${ll}%eth0`, port: APP_PORT }];
  const outside = judgeProbes(await lab.probe(lab.pod('outsider'), targets, DROP_TIMEOUT_MS), []);
  const inside = await lab.probe(lab.pod('attacker'), targets, DROP_TIMEOUT_MS);
  const enrolled = judgeProbes(inside, await lab.moves(), 'node-a');
  return combine(
    { observed: outside.observed, evidence: outside.evidence.map((e) => `outsider ${e}`) },
    { observed: enrolled.observed, evidence: enrolled.evidence.map((e) => `attacker ${e}`) },
  );
}

async function directProbe(lab: BypassLab, s: Source, family: Family) {
  const { pod, node } = s.from(lab);
  const targets = [{ host: addressOf(lab.pod(s.target), family), port: APP_PORT }];
  const results = pod
    ? await lab.probe(pod, targets, DROP_TIMEOUT_MS)
    : await lab.probeFromNode(lab.node(node), targets, DROP_TIMEOUT_MS);
  return judgeProbes(results, await lab.moves(), pod ? node : undefined);
}
