import { randomBytes } from 'node:crypto';
import type { ClusterSpec } from './cluster-spec.js';

/**
 * Names and addresses of a cluster, derived from its spec and run id alone, so that a
 * later process (`zmesh cluster down`, stale cleanup) can rebuild them from the state
 * file. Every host-visible name (netns, cgroup) starts with PREFIX and the run id;
 * interface names live only inside the cluster's own namespaces.
 */
export const PREFIX = 'zm-';
/** Pod Linux uids: UID_BASE + node index * 1000 + pod index (unique per pod). */
const UID_BASE = 200_000;

export interface NodeInfo {
  name: string;
  /** 1-based; the third octet of the node's pod subnet. */
  index: number;
  netns: string;
  netnsPath: string;
  podCidr4: string;
  podCidr6: string;
  gateway4: string;
  gateway6: string;
  fabric4: string;
  fabric6: string;
  /** cgroup (v2) for node processes such as ztunnel; no capture programs ever attach here. */
  cgroupPath: string;
}

export interface PodInfo {
  name: string;
  namespace: string;
  serviceAccount: string;
  node: string;
  /** Workload uid as the node agent and control plane know it; also a safe BPF pin name. */
  uid: string;
  /** Linux uid and gid the pod's processes run as. */
  linuxUid: number;
  ipv4: string;
  ipv6: string;
  netns: string;
  netnsPath: string;
  cgroupPath: string;
  /** Interface name of the pod's veth inside the node namespace. */
  nodeIfname: string;
}

export interface Topology {
  runId: string;
  nodes: NodeInfo[];
  pods: PodInfo[];
  fabricNetns: string;
  cgroupRoot: string;
}

export function newRunId(): string {
  return randomBytes(3).toString('hex');
}

function netnsPath(name: string): string {
  return `/run/netns/${name}`;
}

export function runGroup(cgroupMount: string, runId: string): string {
  return `${cgroupMount}/${PREFIX}${runId}`;
}

export function buildTopology(spec: ClusterSpec, runId: string, cgroupMount: string): Topology {
  const run = `${PREFIX}${runId}`;
  const cgroupRoot = runGroup(cgroupMount, runId);
  const nodes = spec.nodes.map((name, i): NodeInfo => {
    const index = i + 1;
    const netns = `${run}-n${index}`;
    return {
      name,
      index,
      netns,
      netnsPath: netnsPath(netns),
      podCidr4: `10.244.${index}.0/24`,
      podCidr6: `fd00:244:${index}::/64`,
      gateway4: `10.244.${index}.1`,
      gateway6: `fd00:244:${index}::1`,
      fabric4: `10.255.0.${index}`,
      fabric6: `fd00:255::${index}`,
      cgroupPath: `${cgroupRoot}/nodes/${name}`,
    };
  });
  const perNode = new Map<string, number>();
  const pods = spec.pods.map((p): PodInfo => {
    const node = nodes.find((n) => n.name === p.node)!;
    const j = (perNode.get(node.name) ?? 0) + 1;
    perNode.set(node.name, j);
    const netns = `${run}-n${node.index}p${j}`;
    return {
      ...p,
      uid: `${run}-${p.namespace}-${p.name}`,
      linuxUid: UID_BASE + node.index * 1000 + j,
      ipv4: `10.244.${node.index}.${j + 1}`,
      ipv6: `fd00:244:${node.index}::${(j + 1).toString(16)}`,
      netns,
      netnsPath: netnsPath(netns),
      // kubelet's cgroupfs layout (a pod<uid> cgroup per pod), which ztunnel's ZDS client
      // finds from the uid as it would on a real node.
      cgroupPath: `${cgroupRoot}/kubepods/besteffort/pod${run}-${p.namespace}-${p.name}`,
      nodeIfname: `p${j}`,
    };
  });
  return { runId, nodes, pods, fabricNetns: `${run}-fabric`, cgroupRoot };
}
