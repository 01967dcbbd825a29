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

/** A local mesh's service: ServiceShape and the pod, by name, that is its waypoint. */
export interface LocalServiceShape extends ServiceShape {
  waypoint?: string;
}

/**
 * The config file of a mesh without a control plane (`zmesh ztunnel --config`): `pods` as
 * workloads (with their services' ports), the services, and `policies` as given. A waypoint
 * is named by the pod, among `all`, whose address it is.
 */
export function localConfigYaml(
  pods: readonly PodInfo[],
  all: readonly PodInfo[],
  spec: {
    services?: readonly LocalServiceShape[];
    policies?: unknown[];
    podWaypoints?: Record<string, string>;
  },
): string {
  const serviceKey = (s: ServiceShape) => `${s.namespace}/${s.name}.${s.namespace}.svc.cluster.local`;
  const waypointOf = (podName: string | undefined) => {
    const pod = podName === undefined ? undefined : all.find((x) => x.name === podName);
    return pod ? { waypoint: { address: pod.ipv4 } } : {};
  };
  const ports = (s: ServiceShape) => s.ports.map((x) => ({ servicePort: x.port, targetPort: x.targetPort }));
  const workloads = pods.map((p) => ({
    ...waypointOf(spec.podWaypoints?.[p.name]),
    uid: p.uid,
    name: p.name,
    namespace: p.namespace,
    serviceAccount: p.serviceAccount,
    addresses: [p.ipv4, p.ipv6],
    node: p.node,
    services: Object.fromEntries(
      (spec.services ?? [])
        .filter((s) => s.namespace === p.namespace && s.pods.includes(p.name))
        .map((s) => [serviceKey(s), ports(s)]),
    ),
  }));
  const services = (spec.services ?? []).map((s) => ({
    ...waypointOf(s.waypoint),
    name: s.name,
    namespace: s.namespace,
    addresses: [s.vip],
    ports: ports(s),
  }));
  return stringify({ workloads, services, policies: spec.policies ?? [] });
}
