import { cgroup2Mount } from '../cluster/cgroups.js';
import type { Attempt, Outcome } from './attempt.js';
import { addressOf, DROP_TIMEOUT_MS } from './attempts-direct.js';
import { APP_PORT, type BypassLab, type ProbeResult } from './bypass-lab.js';
import { PROBE } from './bypass-programs.js';
import { describeProbe, judgePrivileges, judgeProbes } from './judge.js';

/** What a pod's process may try against its own confinement: all from the enrolled attacker pod. */
export function processAttempts(): Attempt[] {
  return [
    {
      id: 'process/change-address',
      description: "a pod adding another pod's address to its interface, or binding to it",
      expected: 'denied',
      run: async (lab) => {
        const ip = lab.pod('client').ipv4;
        const r = await lab.privileges(lab.pod('attacker'), [
          { check: 'addr_add', cidr: `${ip}/24`, dev: 'eth0' },
          { check: 'bind_other', ip },
        ]);
        return judgePrivileges(r, () => true);
      },
    },
    {
      id: 'process/socket-mark-and-raw',
      description:
        'a pod setting SO_MARK, IP_TRANSPARENT or TCP_REPAIR (CAP_NET_ADMIN) or opening a raw socket (CAP_NET_RAW)',
      expected: 'denied',
      run: async (lab) => {
        const r = await lab.privileges(lab.pod('attacker'), [
          { check: 'so_mark' },
          { check: 'tcp_repair' },
          { check: 'ip_transparent' },
          { check: 'raw_socket' },
        ]);
        return judgePrivileges(r, () => true);
      },
    },
    {
      id: 'process/userns-caps-on-pod-socket',
      description:
        'a pod that makes a socket, then a user namespace (full capabilities there) and sets SO_MARK/IP_TRANSPARENT/TCP_REPAIR on it',
      expected: 'denied',
      run: async (lab) =>
        judgePrivileges(
          await lab.privileges(lab.pod('attacker'), [{ check: 'userns_pod_socket' }]),
          () => true,
        ),
    },
    {
      id: 'process/spoof-source-freebind',
      description:
        "a pod binding another pod's address with IP_FREEBIND (unprivileged) and connecting from it",
      expected: 'denied',
      alsoAccepted: ['captured'],
      run: spoofSource,
    },
    {
      id: 'process/move-cgroup',
      description:
        "a pod moving itself out of its cgroup (to the root, to another pod's, to ztunnel's node cgroup)",
      expected: 'denied',
      run: async (lab) => {
        const paths = [cgroup2Mount(), lab.pod('server').cgroupPath, lab.node('node-a').cgroupPath];
        const r = await lab.privileges(lab.pod('attacker'), [
          ...paths.map((path) => ({ check: 'cgroup_move', path })),
          { check: 'own_cgroup' },
        ]);
        return judgePrivileges(r, (x) => x.check === 'cgroup_move');
      },
    },
    {
      id: 'process/ptrace-other-pod',
      description: "a pod ptracing another pod's application and the node's ztunnel (by host pid)",
      expected: 'denied',
      run: (lab) =>
        otherProcesses(lab, (pid) => [
          { check: 'ptrace', pid },
          { check: 'kill0', pid },
        ]),
    },
    {
      id: 'process/pidfd-getfd-other-pod',
      description: "a pod taking a socket of another pod's application or of ztunnel with pidfd_getfd",
      expected: 'denied',
      run: (lab) =>
        otherProcesses(lab, (pid) => [3, 10, 20].map((fd) => ({ check: 'pidfd_getfd', pid, fd }))),
    },
    {
      id: 'process/unshare-user-net',
      description:
        'a pod creating its own user and network namespace (unshare -Urn) and trying every target from it',
      expected: 'denied',
      run: unshareUserNet,
    },
  ];
}

/** Host pids of the server's app and of both ztunnels: none may be visible, let alone traced. */
async function otherProcesses(
  lab: BypassLab,
  checks: (pid: number) => Record<string, unknown>[],
): Promise<Outcome> {
  const pids = [lab.appPid('server'), lab.mesh.ztunnelPid('node-a'), lab.mesh.ztunnelPid('node-b')];
  if (pids.some((p) => p === undefined)) throw new Error(`target pids not found: ${pids.join(',')}`);
  const r = await lab.privileges(lab.pod('attacker'), [
    ...pids.flatMap((pid) => checks(pid!)),
    { check: 'visible_pids' },
  ]);
  const o = judgePrivileges(r, (x) => x.check !== 'visible_pids');
  o.evidence.unshift(
    `targets: server app host pid ${pids[0]}, ztunnel node-a ${pids[1]}, ztunnel node-b ${pids[2]}`,
  );
  return o;
}

async function spoofSource(lab: BypassLab): Promise<Outcome> {
  const server = lab.pod('server');
  const spoofed = lab.pod('client').ipv4;
  const r = await lab.privileges(lab.pod('attacker'), [
    {
      check: 'freebind_connect',
      ip: spoofed,
      host: server.ipv4,
      port: APP_PORT,
      timeout: DROP_TIMEOUT_MS / 1000,
    },
    {
      check: 'freebind_connect',
      ip: spoofed,
      host: server.ipv4,
      port: 15008,
      timeout: DROP_TIMEOUT_MS / 1000,
    },
  ]);
  const o = judgePrivileges(r, () => true);
  const moves = (await lab.moves()).filter((m) => m.node === 'node-a');
  if (
    o.observed === 'denied' &&
    moves.some((m) => m.series.startsWith('istio_tcp_connections_opened_total{reporter="source"'))
  )
    o.observed = 'captured';
  return o;
}

/**
 * `unshare -Urn` is allowed without privilege: the pod becomes root of a new user and
 * network namespace. That namespace has only a loopback, and the process is still in the
 * pod's cgroup (so capture still rewrites its connects, to a 15001 nobody serves there).
 */
async function unshareUserNet(lab: BypassLab): Promise<Outcome> {
  const server = lab.pod('server');
  const targets = [
    ...(['IPv4', 'IPv6', 'IPv4-mapped'] as const).map((f) => ({
      host: addressOf(server, f),
      port: APP_PORT,
    })),
    { host: server.ipv4, port: 15008 },
    { host: lab.node('node-a').gateway4, port: 15000 },
    { host: lab.pod('sink').ipv4, port: APP_PORT },
  ];
  const script =
    'echo "links: $(ip -o link show | cut -d: -f2 | tr -d "\\n")"; ip link set lo up && echo "lo up, uid $(id -u)"; exec node -e "$0" "$1"';
  const r = await lab.mesh.cluster.exec(lab.pod('attacker'), [
    'unshare',
    '-Urn',
    'sh',
    '-c',
    script,
    PROBE,
    JSON.stringify({ timeoutMs: DROP_TIMEOUT_MS, targets }),
  ]);
  const lines = r.stdout.trim().split('\n');
  if (r.exitCode !== 0 && lines.length < 2) {
    return { observed: 'denied', evidence: [`unshare -Urn refused: ${r.stderr.trim().slice(0, 200)}`] };
  }
  const results = JSON.parse(lines.pop() ?? '[]') as ProbeResult[];
  const o = judgeProbes(results, []);
  o.evidence = [
    ...lines,
    ...results.map(describeProbe),
    "ECONNREFUSED: still in the pod's cgroup, connects are rewritten to 15001 of the new namespace, where nothing listens",
  ];
  return o;
}
