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

/**
 * A namespace's waypoint (Istio's `istio-waypoint` Gateway): the pod that runs it, whose
 * address is the Gateway's. The namespace is labelled to use it (`zmesh ns l7 on`), so its
 * services and pods are reached through it.
 */
export interface WaypointShape {
  name: string;
  namespace: string;
  pod: string;
}

/** Set on a waypoint's own pods (Istio's label): they never go through a waypoint themselves. */
const GATEWAY_NAME_LABEL = 'gateway.networking.k8s.io/gateway-name';

/** A label per service a pod backs, so a Service selector picks exactly its listed pods. */
const memberLabel = (service: string) => `zmesh-member-${service}`;

/** Kubernetes-shaped Pod YAML for one harness pod (ambient via its namespace). */
function podObject(
  pod: PodInfo,
  services: readonly ServiceShape[],
  waypoints: readonly WaypointShape[] = [],
): object {
  const labels: Record<string, string> = { app: pod.name };
  for (const s of services)
    if (s.namespace === pod.namespace && s.pods.includes(pod.name)) labels[memberLabel(s.name)] = 'true';
  const runs = waypoints.find((w) => w.namespace === pod.namespace && w.pod === pod.name);
  if (runs) labels[GATEWAY_NAME_LABEL] = runs.name;
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
 * namespace (ambient, and using its waypoint if it has one), the given pods, the services
 * and the waypoints' Gateways (addressed by their pods' IPs, which `all` must hold).
 * Applied through `zmesh apply`'s path.
 */
export function meshYaml(
  pods: readonly PodInfo[],
  services: readonly ServiceShape[],
  waypoints: readonly WaypointShape[] = [],
  all: readonly PodInfo[] = pods,
): string {
  const namespaces = [...new Set([...pods.map((p) => p.namespace), ...services.map((s) => s.namespace)])];
  const docs: object[] = namespaces.map((name) => {
    const waypoint = waypoints.find((w) => w.namespace === name);
    return {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: {
        name,
        labels: {
          'istio.io/dataplane-mode': 'ambient',
          ...(waypoint ? { 'istio.io/use-waypoint': waypoint.name } : {}),
        },
      },
    };
  });
  docs.push(
    ...waypoints.map((w) => {
      const pod = all.find((p) => p.namespace === w.namespace && p.name === w.pod);
      if (!pod) throw new Error(`waypoint ${w.namespace}/${w.name}: no pod ${w.pod}`);
      return {
        apiVersion: 'gateway.networking.k8s.io/v1',
        kind: 'Gateway',
        metadata: { name: w.name, namespace: w.namespace },
        spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: pod.ipv4 }] },
      };
    }),
  );
  docs.push(...pods.map((p) => podObject(p, services, waypoints)));
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
