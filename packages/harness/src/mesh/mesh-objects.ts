import { stringify } from 'yaml';
import type { PodInfo } from '../cluster/topology.js';

/** The fields of a mesh service the control plane needs (LocalMesh's MeshService). */
export interface ServiceShape {
  name: string;
  namespace: string;
  vip: string;
  ports: Array<{ port: number; targetPort: number }>;
  pods: string[];
}

/** The workload uid the control plane gives a pod (Istio's `<cluster>//Pod/<ns>/<name>`). */
export function controlPlaneUid(pod: Pick<PodInfo, 'name' | 'namespace'>): string {
  return `Kubernetes//Pod/${pod.namespace}/${pod.name}`;
}

/** A label per service a pod backs, so a Service selector picks exactly its listed pods. */
const memberLabel = (service: string) => `zmesh-member-${service}`;

/** Kubernetes-shaped Pod YAML for one harness pod (ambient via its namespace). */
export function podObject(pod: PodInfo, services: readonly ServiceShape[]): object {
  const labels: Record<string, string> = { app: pod.name };
  for (const s of services)
    if (s.namespace === pod.namespace && s.pods.includes(pod.name)) labels[memberLabel(s.name)] = 'true';
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: pod.name, namespace: pod.namespace, labels },
    spec: { serviceAccountName: pod.serviceAccount, nodeName: pod.node },
    status: { phase: 'Running', podIPs: [{ ip: pod.ipv4 }, { ip: pod.ipv6 }] },
  };
}

/**
 * Multi-document YAML for what the harness registers with the control plane: every
 * namespace (ambient), the given pods, and the services. Applied through `zmesh apply`'s path.
 */
export function meshYaml(pods: readonly PodInfo[], services: readonly ServiceShape[]): string {
  const namespaces = [...new Set([...pods.map((p) => p.namespace), ...services.map((s) => s.namespace)])];
  const docs: object[] = namespaces.map((name) => ({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, labels: { 'istio.io/dataplane-mode': 'ambient' } },
  }));
  docs.push(...pods.map((p) => podObject(p, services)));
  docs.push(
    ...services.map((s) => ({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: s.name, namespace: s.namespace },
      spec: {
        clusterIP: s.vip,
        selector: { [memberLabel(s.name)]: 'true' },
        ports: s.ports.map((p) => ({ port: p.port, targetPort: p.targetPort })),
      },
    })),
  );
  return docs.map((d) => stringify(d)).join('---\n');
}
