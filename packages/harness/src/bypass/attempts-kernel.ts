import type { Attempt, Outcome } from './attempt.js';
import { DROP_TIMEOUT_MS } from './attempts-direct.js';
import { APP_PORT, type BypassLab } from './bypass-lab.js';
import { judgePrivileges } from './judge.js';
import { moved } from './metric-deltas.js';

/**
 * Going around capture through the kernel: transports other than TCP, the BPF pins that
 * hold capture in place, and namespaces a pod may create without privilege.
 */
export function kernelAttempts(): Attempt[] {
  return [
    {
      id: 'kernel/other-transports',
      description:
        'an enrolled pod connecting with SCTP (not captured: must be refused) and MPTCP (subflows captured)',
      expected: 'captured',
      alsoAccepted: ['denied'],
      run: otherTransports,
    },
    {
      id: 'kernel/bpf-pins',
      description: 'a pod removing or renaming its own capture pins in bpffs, or opening them with bpf()',
      expected: 'denied',
      run: bpfPins,
    },
    {
      id: 'kernel/cgroup-namespace-escape',
      description:
        'a pod in its own user, mount and cgroup namespace: mounting cgroup v1 net_cls (disables cgroup2 socket matching) or moving itself',
      expected: 'denied',
      run: cgroupNamespace,
    },
  ];
}

async function otherTransports(lab: BypassLab): Promise<Outcome> {
  const host = lab.pod('server').ipv4;
  const timeout = DROP_TIMEOUT_MS / 1000;
  const r = await lab.privileges(lab.pod('attacker'), [
    { check: 'sctp_connect', host, port: APP_PORT, timeout },
    { check: 'mptcp_connect', host, port: APP_PORT, timeout },
  ]);
  const o = judgePrivileges(r, () => true);
  const moves = (await lab.moves()).filter((m) => m.node === 'node-a');
  const captured = moved(moves, 'istio_tcp_connections_opened_total', 'reporter="source"');
  o.evidence.push(
    `node-a ztunnel handled ${captured} connection(s) from the attacker (MPTCP subflow captured)`,
  );
  if (o.observed === 'denied' && captured > 0) o.observed = 'captured';
  return o;
}

async function bpfPins(lab: BypassLab): Promise<Outcome> {
  const attacker = lab.pod('attacker');
  const dir = `/sys/fs/bpf/zmesh/${lab.mesh.captureScope('node-a')}/${attacker.uid}`;
  const r = await lab.privileges(attacker, [
    { check: 'unlink', path: `${dir}/link/zm_connect4` },
    { check: 'unlink', path: `${dir}/link/zm_ingress` },
    { check: 'rename', path: dir },
    { check: 'mkdir', path: `/sys/fs/bpf/zmesh/${lab.mesh.captureScope('node-a')}/squat` },
    { check: 'bpf_obj_get', path: `${dir}/link/zm_connect4` },
    { check: 'bpf_obj_get', path: `${dir}/map/zm_counters` },
  ]);
  return judgePrivileges(r, () => true);
}

/**
 * `unshare -UrmC` is unprivileged: the pod is root of its own user, mount and cgroup
 * namespaces. From there: mount cgroup v1 net_cls/net_prio (using either controller
 * anywhere makes the kernel stop matching sockets to cgroup v2, which would switch off
 * capture for every pod; bpf/README.md gotchas), and mount its cgroup2 view to move itself.
 */
async function cgroupNamespace(lab: BypassLab): Promise<Outcome> {
  const script = [
    'mount -t cgroup -o net_cls none /mnt 2>&1; echo "net_cls rc=$?"',
    'mount -t cgroup -o net_prio none /mnt 2>&1; echo "net_prio rc=$?"',
    'if mount -t cgroup2 none /mnt 2>&1; then echo "cgroup2 view mounted";',
    '  mkdir /mnt/escape 2>&1; echo "mkdir rc=$?";',
    '  echo $$ > /mnt/cgroup.procs 2>&1; echo "move-to-own-root rc=$?";',
    'else echo "cgroup2 mount refused"; fi',
  ].join('\n');
  const r = await lab.mesh.cluster.exec(lab.pod('attacker'), ['unshare', '-UrmC', 'sh', '-c', script]);
  const lines = `${r.stdout}\n${r.stderr}`.trim().split('\n').filter(Boolean);
  if (lines.length === 0) throw new Error(`no output (exit ${r.exitCode})`);
  const rc = (name: string) => Number(/rc=(\d+)/.exec(lines.find((l) => l.startsWith(name)) ?? 'rc=1')?.[1]);
  const escaped = rc('net_cls') === 0 || rc('net_prio') === 0 || rc('mkdir') === 0;
  const evidence = [
    ...lines.filter((l) => /rc=|cgroup2|Permission denied/.test(l)).map((l) => l.slice(0, 160)),
    'the cgroup namespace root is the pod cgroup itself: "moving" there changes nothing (still captured)',
  ];
  if (!lines.some((l) => l.startsWith('net_cls'))) evidence.push(`unshare -UrmC refused: exit ${r.exitCode}`);
  return { observed: escaped ? 'delivered' : 'denied', evidence };
}
