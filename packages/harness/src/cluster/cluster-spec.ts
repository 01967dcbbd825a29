import { err, ok, type Result } from '@zmesh/shared/cli';
import { parse } from 'yaml';

/**
 * The cluster a test or operator asks for: nodes and the pods scheduled on them.
 *
 * ```yaml
 * nodes: [node-a, node-b]
 * pods:
 *   - { name: client, namespace: default, serviceAccount: sleep, node: node-a }
 * ```
 */
export interface ClusterSpec {
  nodes: string[];
  pods: PodSpec[];
}

export interface PodSpec {
  name: string;
  namespace: string;
  serviceAccount: string;
  node: string;
}

/** Bounds that keep every address inside 10.244.<node>.0/24 and fd00:244:<node>::/64. */
const MAX_NODES = 200;
const MAX_PODS_PER_NODE = 200;
const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** Decodes a spec from YAML text; never throws, returns every reason it found. */
export function parseClusterSpec(text: string): Result<ClusterSpec> {
  let raw: unknown;
  try {
    raw = parse(text);
  } catch (e) {
    return err([`not YAML: ${(e as Error).message.split('\n')[0]}`]);
  }
  return validateClusterSpec(raw);
}

export function validateClusterSpec(raw: unknown): Result<ClusterSpec> {
  const reasons: string[] = [];
  const obj = (raw ?? {}) as { nodes?: unknown; pods?: unknown };
  const nodes = Array.isArray(obj.nodes) ? obj.nodes.map((n) => (typeof n === 'object' ? n?.name : n)) : [];
  if (nodes.length === 0) reasons.push('nodes: need at least one node');
  if (nodes.length > MAX_NODES) reasons.push(`nodes: at most ${MAX_NODES}`);
  for (const n of nodes) if (typeof n !== 'string' || !NAME.test(n)) reasons.push(`nodes: bad name ${n}`);
  if (new Set(nodes).size !== nodes.length) reasons.push('nodes: duplicate name');
  const pods: PodSpec[] = [];
  const rawPods = Array.isArray(obj.pods) ? obj.pods : [];
  if (obj.pods !== undefined && !Array.isArray(obj.pods)) reasons.push('pods: must be a list');
  rawPods.forEach((p: Record<string, unknown>, i) => {
    const pod = {
      name: p?.name,
      namespace: p?.namespace ?? 'default',
      serviceAccount: p?.serviceAccount ?? 'default',
      node: p?.node,
    };
    for (const [k, v] of Object.entries(pod)) {
      if (typeof v !== 'string' || !NAME.test(v)) reasons.push(`pods[${i}].${k}: bad value ${String(v)}`);
    }
    if (!nodes.includes(pod.node)) reasons.push(`pods[${i}].node: unknown node ${String(pod.node)}`);
    pods.push(pod as PodSpec);
  });
  const keys = pods.map((p) => `${p.namespace}/${p.name}`);
  if (new Set(keys).size !== keys.length) reasons.push('pods: duplicate namespace/name');
  for (const n of nodes) {
    if (pods.filter((p) => p.node === n).length > MAX_PODS_PER_NODE) reasons.push(`node ${n}: too many pods`);
  }
  return reasons.length > 0 ? err(reasons) : ok({ nodes: nodes as string[], pods });
}

/** `nodes` nodes named node-a, node-b, … with `podsPerNode` pods each (pod-a1, pod-a2, …). */
export function gridSpec(nodes: number, podsPerNode: number, namespace = 'default'): ClusterSpec {
  const names = Array.from({ length: nodes }, (_, i) => `node-${nodeLetter(i)}`);
  const pods = names.flatMap((node, i) =>
    Array.from({ length: podsPerNode }, (_, j) => ({
      name: `pod-${nodeLetter(i)}${j + 1}`,
      namespace,
      serviceAccount: `sa-${nodeLetter(i)}${j + 1}`,
      node,
    })),
  );
  return { nodes: names, pods };
}

function nodeLetter(i: number): string {
  return i < 26 ? String.fromCharCode(97 + i) : `n${i}`;
}
