import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { ZmeshError } from '@zmesh/shared';
import { inNetns } from '@zmesh/ztunnel';
import { execa } from 'execa';
import type { NodeInfo, PodInfo, Topology } from './topology.js';

/** Bound on one `ip -batch` run. */
const IP_TIMEOUT_MS = 20_000;

/**
 * Builds the cluster's namespaces and links. Layout:
 *   fabric netns: bridge br0 ── veth n<i> ── fab0 in node i (10.255.0.i, fd00:255::i)
 *   node i netns: bridge br0 (10.244.i.1/24, fd00:244:i::1/64) ── veth p<j> ── eth0 in pod
 *   pod netns:    eth0 10.244.i.(j+1)/24, fd00:244:i::(j+1)/64
 * Nodes route the other nodes' pod subnets over the fabric; pods route only the pod
 * supernets (10.244.0.0/16, fd00:244::/32) to their node. No namespace has a default
 * route or a link to the host, so a packet for any other address has nowhere to go.
 */
export async function createNetwork(t: Topology): Promise<void> {
  const all = [t.fabricNetns, ...t.nodes.map((n) => n.netns), ...t.pods.map((p) => p.netns)];
  await ipBatch(
    undefined,
    all.map((ns) => `netns add ${ns}`),
  );
  for (const ns of all) setSysctls(`/run/netns/${ns}`, { 'ipv6/conf/default/accept_dad': '0' });
  for (const n of t.nodes) {
    setSysctls(n.netnsPath, { 'ipv4/ip_forward': '1', 'ipv6/conf/all/forwarding': '1' });
  }
  await ipBatch(t.fabricNetns, fabricCommands(t));
  await Promise.all(t.nodes.map((n) => ipBatch(n.netns, nodeCommands(t, n))));
  await Promise.all(
    t.pods.map((p) =>
      ipBatch(
        p.netns,
        podCommands(
          p,
          t.nodes.find((n) => n.name === p.node),
        ),
      ),
    ),
  );
}

/** Deletes every namespace of the cluster (their interfaces go with them). Synchronous. */
export function deleteNetwork(namespaces: string[]): void {
  if (namespaces.length === 0) return;
  execFileSync('ip', ['-force', '-batch', '-'], {
    input: namespaces.map((ns) => `netns del ${ns}`).join('\n'),
    stdio: ['pipe', 'ignore', 'ignore'],
    timeout: IP_TIMEOUT_MS,
  });
}

export async function listNetns(): Promise<string[]> {
  const { stdout } = await execa('ip', ['-j', 'netns', 'list'], { timeout: IP_TIMEOUT_MS });
  if (stdout.trim() === '') return [];
  return (JSON.parse(stdout) as { name: string }[]).map((n) => n.name);
}

function setSysctls(netnsPath: string, values: Record<string, string>): void {
  // /proc/sys/net belongs to the opening thread's netns, which inNetns switches.
  inNetns(netnsPath, () => {
    for (const [key, value] of Object.entries(values)) writeFileSync(`/proc/sys/net/${key}`, value);
  });
}

function fabricCommands(t: Topology): string[] {
  const cmds = ['link set lo up', 'link add br0 type bridge mcast_snooping 0', 'link set br0 up'];
  for (const n of t.nodes) {
    cmds.push(
      `link add n${n.index} type veth peer name fab0 netns ${n.netns}`,
      `link set n${n.index} master br0`,
      `link set n${n.index} up`,
    );
  }
  return cmds;
}

function nodeCommands(t: Topology, n: NodeInfo): string[] {
  const cmds = [
    'link set lo up',
    'link add br0 type bridge mcast_snooping 0',
    `addr add ${n.gateway4}/24 dev br0`,
    `addr add ${n.gateway6}/64 dev br0 nodad`,
    'link set br0 up',
    `addr add ${n.fabric4}/24 dev fab0`,
    `addr add ${n.fabric6}/64 dev fab0 nodad`,
    'link set fab0 up',
  ];
  for (const other of t.nodes) {
    if (other === n) continue;
    cmds.push(
      `route add ${other.podCidr4} via ${other.fabric4}`,
      `route add ${other.podCidr6} via ${other.fabric6}`,
    );
  }
  for (const p of t.pods.filter((pod) => pod.node === n.name)) {
    cmds.push(
      `link add ${p.nodeIfname} type veth peer name eth0 netns ${p.netns}`,
      `link set ${p.nodeIfname} master br0`,
      `link set ${p.nodeIfname} up`,
    );
  }
  return cmds;
}

function podCommands(p: PodInfo, n: NodeInfo | undefined): string[] {
  if (n === undefined)
    throw new ZmeshError('ZM_ERR_CLUSTER_SETUP', { step: 'network', reason: `no node ${p.node}` });
  return [
    'link set lo up',
    `addr add ${p.ipv4}/24 dev eth0`,
    `addr add ${p.ipv6}/64 dev eth0 nodad`,
    'link set eth0 up',
    `route add 10.244.0.0/16 via ${n.gateway4}`,
    `route add fd00:244::/32 via ${n.gateway6}`,
  ];
}

async function ipBatch(netns: string | undefined, commands: string[]): Promise<void> {
  const args = [...(netns === undefined ? [] : ['-n', netns]), '-batch', '-'];
  try {
    await execa('ip', args, { input: commands.join('\n'), timeout: IP_TIMEOUT_MS });
  } catch (e) {
    const reason = (e as { stderr?: string }).stderr || String(e);
    throw new ZmeshError('ZM_ERR_CLUSTER_SETUP', { step: `ip ${netns ?? ''}`, reason }, { cause: e });
  }
}
