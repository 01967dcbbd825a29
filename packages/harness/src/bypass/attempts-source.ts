import { execFileSync } from 'node:child_process';
import type { Attempt, Outcome } from './attempt.js';
import { DROP_TIMEOUT_MS } from './attempts-direct.js';
import { APP_PORT, type BypassLab } from './bypass-lab.js';
import { judgePrivileges } from './judge.js';
import { moved } from './metric-deltas.js';
import { ZTUNNEL_MARK } from './target-witness.js';

/** Bound on how long the targets' lines may lag behind an answer. */
const WITNESS_SETTLE_MS = 150;

/**
 * What source-address preservation opens (issue 35): ztunnel connects to the app from the
 * client's own address, so an address a pod can forge must never be the one the app sees,
 * and the app's replies to an address that is not in its pod must never leave the pod.
 */
export function sourceAttempts(): Attempt[] {
  return [
    {
      id: 'source/spoof-from-pod',
      description:
        "a pod binding another pod's address (IP_FREEBIND, IPv4 and IPv6) and connecting through the mesh, and a pod outside the mesh doing the same straight to the target: the app must never see the forged address",
      expected: 'captured',
      alsoAccepted: ['denied'],
      run: spoofFromPod,
    },
    {
      id: 'source/replies-leave',
      description:
        "replies of an app to a preserved client address (IPv4 and IPv6) leaving the pod's interface instead of returning to ztunnel",
      expected: 'captured',
      run: repliesLeave,
    },
  ];
}

const unmapped = (ip: string) => ip.replace(/^::ffff:/, '');

async function spoofFromPod(lab: BypassLab): Promise<Outcome> {
  const client = lab.pod('client');
  const sink = lab.pod('sink');
  const server = lab.pod('server');
  const timeout = DROP_TIMEOUT_MS / 1000;
  const forged = (host: string, ip: string) => ({
    check: 'freebind_connect',
    ip,
    host,
    port: APP_PORT,
    timeout,
  });
  const fromAttacker = await lab.privileges(lab.pod('attacker'), [
    forged(sink.ipv4, client.ipv4),
    forged(sink.ipv6, client.ipv6),
  ]);
  const fromOutsider = await lab.privileges(lab.pod('outsider'), [
    forged(server.ipv4, client.ipv4),
    forged(server.ipv6, client.ipv6),
  ]);
  await new Promise((r) => setTimeout(r, WITNESS_SETTLE_MS));
  const results = [...fromAttacker, ...fromOutsider];
  const o = judgePrivileges(results, () => false);
  o.evidence = o.evidence.map((line, i) => `${i < fromAttacker.length ? 'attacker' : 'outsider'} ${line}`);
  const spoofed = new Set([client.ipv4, client.ipv6]);
  const seen = lab.witness.sinceMark().filter((e) => e.kind === 'tcp');
  const forgedSeen = seen.filter((e) => spoofed.has(unmapped(e.peer)));
  const answeredForged = results.filter((r) => [...spoofed].some((ip) => r.detail.includes(ip)));
  if (forgedSeen.length > 0 || answeredForged.length > 0) {
    o.evidence.push(
      `BYPASS: an app saw the forged client address (${[...forgedSeen.map((e) => `${e.target} saw ${e.peer}`), ...answeredForged.map((r) => r.detail)].join(', ')})`,
    );
    return { observed: 'delivered', evidence: o.evidence };
  }
  o.evidence.push(
    seen.length === 0
      ? 'no app saw any connection'
      : `apps saw only: ${seen.map((e) => `${e.target} ← ${e.peer} mark ${e.mark}`).join(', ')}`,
  );
  const atSource = (await lab.moves()).filter((m) => m.node === 'node-a');
  const captured =
    moved(atSource, 'istio_tcp_connections_opened_total', 'reporter="source"') > 0 ||
    moved(atSource, 'zmesh_capture_refused_total') > 0 ||
    moved(atSource, 'zmesh_capture_original_dst_misses_total') > 0;
  return { observed: captured ? 'captured' : 'denied', evidence: o.evidence };
}

/**
 * The attacker's ordinary connections to the sink (which admits anyone) arrive with the
 * attacker's address preserved; a counter on the sink pod's OUTPUT (anything but lo, from
 * the app port) must stay at zero. A pod cannot re-mark its own socket (SO_MARK needs
 * CAP_NET_ADMIN: process/socket-mark-and-raw), so this is the path its replies take.
 */
async function repliesLeave(lab: BypassLab): Promise<Outcome> {
  const sink = lab.pod('sink');
  const attacker = lab.pod('attacker');
  const rule = ['OUTPUT', '!', '-o', 'lo', '-p', 'tcp', '--sport', String(APP_PORT)];
  const tools = ['iptables', 'ip6tables'] as const;
  const inSink = (argv: string[]) =>
    execFileSync('nsenter', [`--net=${sink.netnsPath}`, ...argv], { encoding: 'utf8' });
  for (const tool of tools) inSink([tool, '-I', ...rule]);
  try {
    const probes = await lab.probe(attacker, [
      { host: sink.ipv4, port: APP_PORT },
      { host: sink.ipv6, port: APP_PORT },
    ]);
    await new Promise((r) => setTimeout(r, WITNESS_SETTLE_MS));
    const leaving = tools
      .map((tool) => inSink([tool, '-L', 'OUTPUT', '-v', '-x', '-n']))
      .flatMap((out) => out.split('\n').filter((l) => l.includes(`spt:${APP_PORT}`)))
      .reduce((n, l) => n + Number(l.trim().split(/\s+/)[0]), 0);
    const seen = lab.witness.sinceMark().filter((e) => e.target === 'sink' && e.kind === 'tcp');
    const preserved = seen.filter(
      (e) => e.mark === ZTUNNEL_MARK && [attacker.ipv4, attacker.ipv6].includes(unmapped(e.peer)),
    );
    const evidence = [
      ...probes.map(
        (p) =>
          `attacker → ${p.target}: ${p.answer ? `sink answered "${p.answer}"` : (p.error ?? 'no answer')}`,
      ),
      `sink saw ${seen.map((e) => `${e.peer} mark ${e.mark}`).join(', ') || 'nothing'}; ${preserved.length} with the attacker's own address through ztunnel`,
      `${leaving} segment(s) from the sink app's port left its pod other than over lo`,
    ];
    if (leaving > 0)
      return { observed: 'delivered', evidence: [...evidence, 'BYPASS: replies left the pod'] };
    if (preserved.length !== 2 || probes.some((p) => !p.answer))
      return {
        observed: 'error',
        evidence: [...evidence, 'the preserved-source path did not run: proves nothing'],
      };
    return { observed: 'captured', evidence };
  } finally {
    for (const tool of tools) inSink([tool, '-D', ...rule]);
  }
}
