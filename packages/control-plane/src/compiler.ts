import type { AppProtocol, GatewayRef, Port, Service, Workload, XdsAuthorization } from '@zmesh/shared';
import { objectsOf, type StoreView } from './config-store.js';
import {
  type AuthorizationPolicyObject,
  type GatewayObject,
  type NamespaceObject,
  type PodObject,
  type ServiceObject,
  WAYPOINT_CLASS,
} from './k8s-objects.js';

/** Istio's labels (istio.io/latest/docs/ambient). */
export const DATAPLANE_MODE_LABEL = 'istio.io/dataplane-mode';
export const USE_WAYPOINT_LABEL = 'istio.io/use-waypoint';
/** Set by Istio on a waypoint's own pods; they never go through a waypoint themselves. */
export const GATEWAY_NAME_LABEL = 'gateway.networking.k8s.io/gateway-name';
export const HBONE_PORT = 15008;
/** Only labels under this prefix reach proxies (tenancy overrides, DESIGN.md §7). */
const ZMESH_LABEL_PREFIX = 'zmesh.io/';

export interface CompilerOptions {
  trustDomain: string;
  clusterDomain?: string;
  clusterId?: string;
  /** Converts a raw AuthorizationPolicy; undefined drops it (the authz helper supplies this). */
  convertPolicy?: (raw: Record<string, unknown>) => XdsAuthorization | undefined;
}

export interface CompiledConfig {
  workloads: Workload[];
  services: Service[];
  authorizations: XdsAuthorization[];
}

/** Compiles the store into the resources served over xDS. Pure: same view, same output. */
export function compile(view: StoreView, opts: CompilerOptions): CompiledConfig {
  const namespaces = new Map(objectsOf(view, 'Namespace').map((n) => [n.metadata.name, n]));
  const domain = opts.clusterDomain ?? 'cluster.local';
  const hostnameOf = (name: string, ns: string) => `${name}.${ns}.svc.${domain}`;
  const services = [
    ...objectsOf(view, 'Service').map((s) => compileService(s, namespaces, hostnameOf)),
    ...objectsOf(view, 'Gateway')
      .filter((g) => g.spec.gatewayClassName === WAYPOINT_CLASS)
      .map((g) => waypointService(g, hostnameOf)),
  ];
  const policies = objectsOf(view, 'AuthorizationPolicy');
  const selectors = objectsOf(view, 'Service').filter((s) => s.spec.selector !== undefined);
  const gateways = objectsOf(view, 'Gateway').filter((g) => g.spec.gatewayClassName === WAYPOINT_CLASS);
  const workloads = objectsOf(view, 'Pod').map((pod) =>
    compilePod(pod, { namespaces, selectors, gateways, policies, hostnameOf, opts }),
  );
  const authorizations = policies.flatMap((p) => {
    const converted = opts.convertPolicy?.(p.raw);
    return converted ? [converted] : [];
  });
  return { workloads, services, authorizations };
}

interface PodContext {
  namespaces: Map<string, NamespaceObject>;
  selectors: ServiceObject[];
  gateways: GatewayObject[];
  policies: AuthorizationPolicyObject[];
  hostnameOf: (name: string, ns: string) => string;
  opts: CompilerOptions;
}

function compilePod(pod: PodObject, ctx: PodContext): Workload {
  const { name, namespace, labels } = pod.metadata;
  const nsLabels = ctx.namespaces.get(namespace)?.metadata.labels ?? {};
  const ambient = (labels[DATAPLANE_MODE_LABEL] ?? nsLabels[DATAPLANE_MODE_LABEL]) === 'ambient';
  const isWaypoint = labels[GATEWAY_NAME_LABEL] !== undefined;
  const workload: Workload = {
    uid: `Kubernetes//Pod/${namespace}/${name}`,
    name,
    namespace,
    addresses: pod.status.podIPs,
    network: '',
    node: pod.spec.nodeName,
    trustDomain: ctx.opts.trustDomain,
    serviceAccount: pod.spec.serviceAccountName,
    tunnelProtocol: ambient || isWaypoint ? 'HBONE' : 'NONE',
    services: podServices(pod, ctx),
    authorizationPolicies: ctx.policies
      .filter((p) => policySelects(p, pod))
      .map((p) => `${namespace}/${p.metadata.name}`),
    status: pod.status.phase === undefined || pod.status.phase === 'Running' ? 'HEALTHY' : 'UNHEALTHY',
    canonicalName:
      labels['service.istio.io/canonical-name'] ?? labels['app.kubernetes.io/name'] ?? labels.app ?? name,
    canonicalRevision:
      labels['service.istio.io/canonical-revision'] ??
      labels['app.kubernetes.io/version'] ??
      labels.version ??
      'latest',
    workloadName: labels.app ?? name,
    clusterId: ctx.opts.clusterId ?? 'Kubernetes',
  };
  const waypoint = isWaypoint ? undefined : waypointRef(labels, nsLabels, namespace, ctx.hostnameOf);
  if (waypoint && ambient) workload.waypoint = waypoint;
  const zmeshLabels = Object.entries(labels).filter(([k]) => k.startsWith(ZMESH_LABEL_PREFIX));
  if (zmeshLabels.length > 0) workload.labels = Object.fromEntries(zmeshLabels);
  return workload;
}

function podServices(pod: PodObject, ctx: PodContext): Record<string, Port[]> {
  const out: Record<string, Port[]> = {};
  for (const s of ctx.selectors) {
    if (s.metadata.namespace !== pod.metadata.namespace || !matches(s.spec.selector!, pod.metadata.labels))
      continue;
    out[`${s.metadata.namespace}/${ctx.hostnameOf(s.metadata.name, s.metadata.namespace)}`] =
      s.spec.ports.map((p) => ({ servicePort: p.port, targetPort: p.targetPort }));
  }
  const gatewayName = pod.metadata.labels[GATEWAY_NAME_LABEL];
  const gateway = ctx.gateways.find(
    (g) => g.metadata.name === gatewayName && g.metadata.namespace === pod.metadata.namespace,
  );
  if (gateway) {
    out[`${pod.metadata.namespace}/${ctx.hostnameOf(gateway.metadata.name, pod.metadata.namespace)}`] = [
      { servicePort: HBONE_PORT, targetPort: HBONE_PORT },
    ];
  }
  return out;
}

function compileService(
  s: ServiceObject,
  namespaces: Map<string, NamespaceObject>,
  hostnameOf: (name: string, ns: string) => string,
): Service {
  const { name, namespace, labels } = s.metadata;
  const service: Service = {
    name,
    namespace,
    hostname: hostnameOf(name, namespace),
    addresses: s.spec.clusterIPs.map((address) => ({ network: '', address })),
    ports: s.spec.ports.map((p) => {
      const port: Port = { servicePort: p.port, targetPort: p.targetPort };
      const proto = appProtocol(p.appProtocol, p.name);
      if (proto !== undefined) port.appProtocol = proto;
      return port;
    }),
    subjectAltNames: [],
  };
  const nsLabels = namespaces.get(namespace)?.metadata.labels ?? {};
  const waypoint = waypointRef(labels, nsLabels, namespace, hostnameOf);
  if (waypoint) service.waypoint = waypoint;
  return service;
}

function waypointService(g: GatewayObject, hostnameOf: (name: string, ns: string) => string): Service {
  const { name, namespace } = g.metadata;
  return {
    name,
    namespace,
    hostname: hostnameOf(name, namespace),
    addresses: g.spec.addresses.map((address) => ({ network: '', address })),
    ports: [{ servicePort: HBONE_PORT, targetPort: HBONE_PORT }],
    subjectAltNames: [],
  };
}

/** The object's own `istio.io/use-waypoint` wins over its namespace's; `none` opts out. */
function waypointRef(
  labels: Record<string, string>,
  nsLabels: Record<string, string>,
  namespace: string,
  hostnameOf: (name: string, ns: string) => string,
): GatewayRef | undefined {
  const name = labels[USE_WAYPOINT_LABEL] ?? nsLabels[USE_WAYPOINT_LABEL];
  if (name === undefined || name === '' || name === 'none') return undefined;
  return { hostname: { namespace, hostname: hostnameOf(name, namespace) }, hbonePort: HBONE_PORT };
}

/** Kubernetes appProtocol (and Istio's port-name convention) to the workload API's enum. */
function appProtocol(value: string | undefined, portName: string | undefined): AppProtocol | undefined {
  const v = (value ?? portName?.split('-')[0] ?? '').toLowerCase();
  if (v === 'http' || v === 'http1' || v === 'kubernetes.io/http') return 'HTTP11';
  if (v === 'http2' || v === 'h2c' || v === 'kubernetes.io/h2c') return 'HTTP2';
  if (v === 'grpc') return 'GRPC';
  if (v === 'tcp') return 'TCP';
  if (v === 'tls' || v === 'https') return 'TLS';
  return undefined;
}

function policySelects(policy: AuthorizationPolicyObject, pod: PodObject): boolean {
  if (policy.metadata.namespace !== pod.metadata.namespace) return false;
  const spec = policy.raw.spec as { selector?: { matchLabels?: Record<string, string> } } | undefined;
  const selector = spec?.selector?.matchLabels;
  return selector !== undefined && matches(selector, pod.metadata.labels);
}

function matches(selector: Record<string, string>, labels: Record<string, string>): boolean {
  const entries = Object.entries(selector);
  return entries.length > 0 && entries.every(([k, v]) => labels[k] === v);
}
