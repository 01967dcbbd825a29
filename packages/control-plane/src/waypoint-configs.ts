import type { Service, Workload } from '@zmesh/shared';
import { objectsOf, type StoreView } from './config-store.js';
import type { GatewayObject, GrpcRouteObject, HttpRouteObject, PodObject } from './k8s-objects.js';

/** One waypoint's config (the shape `decodeWaypointConfig` reads), served as `<ns>/<gateway>`. */
export interface WaypointResource {
  name: string;
  config: Record<string, unknown>;
  /** Nodes of the Gateway's pods: only their node tokens may read this resource. */
  nodes: string[];
}

interface Inputs {
  view: StoreView;
  gateways: GatewayObject[];
  services: Service[];
  workloads: Workload[];
  trustDomain: string;
  hostnameOf: (name: string, ns: string) => string;
}

type Raw = Record<string, unknown>;
type Ref = { kind?: unknown; name?: unknown; namespace?: unknown };

/**
 * Per waypoint Gateway: the services that use it (istio.io/use-waypoint, as the compiler
 * resolved it), the services its routes send to, their endpoints, the HTTPRoutes and GRPCRoutes attached
 * to those services, and the AuthorizationPolicies and RequestAuthentications that target
 * the Gateway or the services.
 * Routes and policies pass through as written: the waypoint validates them and NACKs what
 * it cannot enforce, which proxy-status then shows.
 */
export function compileWaypointConfigs(inputs: Inputs): WaypointResource[] {
  const routes = objectsOf(inputs.view, 'HTTPRoute');
  const grpcRoutes = objectsOf(inputs.view, 'GRPCRoute');
  const policies = objectsOf(inputs.view, 'AuthorizationPolicy');
  const rules = objectsOf(inputs.view, 'DestinationRule');
  const authns = objectsOf(inputs.view, 'RequestAuthentication');
  return inputs.gateways.map((g) => {
    const { name, namespace } = g.metadata;
    const hostname = inputs.hostnameOf(name, namespace);
    const pods = waypointPods(inputs.view, g);
    const own = inputs.services.filter((s) => s.waypoint?.hostname?.hostname === hostname);
    const ownKeys = new Set(own.map((s) => `${s.namespace}/${s.name}`));
    const attached = routes.flatMap((r) => attachRoute(r, ownKeys));
    const attachedGrpc = grpcRoutes.flatMap((r) => attachRoute(r, ownKeys));
    const wanted = new Set([...ownKeys, ...[...attached, ...attachedGrpc].flatMap(backendKeys)]);
    const services = inputs.services.filter((s) => wanted.has(`${s.namespace}/${s.name}`));
    const hostKeys = new Set(services.map((s) => `${s.namespace}/${s.hostname}`));
    const workloads = inputs.workloads.filter((w) => Object.keys(w.services).some((k) => hostKeys.has(k)));
    const config = {
      waypoint: {
        name,
        namespace,
        trustDomain: inputs.trustDomain,
        serviceAccount: pods[0]?.spec.serviceAccountName ?? name,
      },
      services: services.map(serviceEntry),
      workloads: workloads.map(workloadEntry),
      httpRoutes: attached,
      grpcRoutes: attachedGrpc,
      authorizationPolicies: policies
        .filter((p) => p.metadata.namespace === namespace && targets(p.raw, name, ownKeys, namespace))
        .map((p) => policyEntry(p.raw, p.metadata)),
      requestAuthentications: authns
        .filter((a) => a.metadata.namespace === namespace && targets(a.raw, name, ownKeys, namespace))
        .map((a) => authnEntry(a.raw, a.metadata)),
      backendPolicies: services.flatMap((s) => backendPolicies(rules, s)),
    };
    return { name: `${namespace}/${name}`, config, nodes: [...new Set(pods.map((p) => p.spec.nodeName))] };
  });
}

/** The route with only the parentRefs that name one of this waypoint's services; none: not attached. */
function attachRoute(r: HttpRouteObject | GrpcRouteObject, ownKeys: Set<string>): Raw[] {
  const spec = (r.raw.spec ?? {}) as Raw;
  const { name, namespace } = r.metadata;
  const parents = (Array.isArray(spec.parentRefs) ? spec.parentRefs : []) as Ref[];
  // GAMMA: a route binds to a Service by parentRef kind Service (zmesh's file form omits it).
  const mine = parents.filter(
    (p) =>
      (p.kind === undefined || p.kind === 'Service') &&
      ownKeys.has(`${typeof p.namespace === 'string' ? p.namespace : namespace}/${String(p.name)}`),
  );
  if (mine.length === 0) return [];
  // creationTimestamp goes along: the waypoint breaks precedence ties by route age (Gateway API).
  const { creationTimestamp } = r.metadata;
  return [
    defined({
      name,
      namespace,
      creationTimestamp,
      parentRefs: mine,
      hostnames: spec.hostnames,
      rules: spec.rules,
    }),
  ];
}

/** The services a route sends to: its backendRefs and its RequestMirror backends. */
function backendKeys(route: Raw): string[] {
  const rules = (Array.isArray(route.rules) ? route.rules : []) as Raw[];
  const key = (b: Ref) =>
    `${typeof b.namespace === 'string' ? b.namespace : route.namespace}/${String(b.name)}`;
  return rules.flatMap((rule) => {
    const refs = (Array.isArray(rule.backendRefs) ? rule.backendRefs : []) as Ref[];
    const filters = (Array.isArray(rule.filters) ? rule.filters : []) as Array<{
      requestMirror?: { backendRef?: Ref };
    }>;
    const mirrors = filters.flatMap((f) =>
      f?.requestMirror?.backendRef ? [f.requestMirror.backendRef] : [],
    );
    return [...refs, ...mirrors].map(key);
  });
}

function targets(raw: Raw, gateway: string, ownKeys: Set<string>, namespace: string): boolean {
  const spec = (raw.spec ?? {}) as Raw;
  return targetRefs(spec).some(
    (t) =>
      (t.kind === 'Gateway' && t.name === gateway) ||
      (t.kind === 'Service' && ownKeys.has(`${namespace}/${String(t.name)}`)),
  );
}

/** Istio accepts `targetRef` (one) and `targetRefs`. */
function targetRefs(spec: Raw): Ref[] {
  if (Array.isArray(spec.targetRefs)) return spec.targetRefs as Ref[];
  return spec.targetRef && typeof spec.targetRef === 'object' ? [spec.targetRef as Ref] : [];
}

function policyEntry(raw: Raw, meta: { name: string; namespace: string }): Raw {
  const spec = (raw.spec ?? {}) as Raw;
  return defined({
    name: meta.name,
    namespace: meta.namespace,
    targetRefs: targetRefs(spec),
    action: spec.action,
    rules: spec.rules,
  });
}

/** A RequestAuthentication as written: the waypoint checks every jwtRule and NACKs what it cannot serve. */
function authnEntry(raw: Raw, meta: { name: string; namespace: string }): Raw {
  const spec = (raw.spec ?? {}) as Raw;
  return defined({
    name: meta.name,
    namespace: meta.namespace,
    targetRefs: targetRefs(spec),
    jwtRules: spec.jwtRules,
  });
}

/** The Gateway's pods, by the label Istio puts on them. */
function waypointPods(view: StoreView, g: GatewayObject): PodObject[] {
  return objectsOf(view, 'Pod').filter(
    (p) =>
      p.metadata.namespace === g.metadata.namespace &&
      p.metadata.labels['gateway.networking.k8s.io/gateway-name'] === g.metadata.name,
  );
}

function serviceEntry(s: Service): Raw {
  return {
    name: s.name,
    namespace: s.namespace,
    hostname: s.hostname,
    addresses: s.addresses.map((a) => a.address),
    ports: s.ports.map((p) => defined({ ...p })),
    subjectAltNames: s.subjectAltNames,
  };
}

/** The file form's optional fields are left out when empty (it refuses an empty `network`). */
function workloadEntry(w: Workload): Raw {
  return defined({
    uid: w.uid,
    name: w.name,
    namespace: w.namespace,
    addresses: w.addresses,
    network: w.network || undefined,
    node: w.node || undefined,
    serviceAccount: w.serviceAccount,
    trustDomain: w.trustDomain,
    services: w.services,
    status: w.status,
    tunnelProtocol: w.tunnelProtocol,
  });
}

function defined(o: Raw): Raw {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

type ServiceShape = { name: string; namespace: string; hostname: string };

/**
 * Istio DestinationRules whose `host` names the service (short name, `name.namespace`, or
 * the FQDN), as the waypoint's backend policy: load balancer, connection-pool limits as the
 * circuit breaker, outlier detection. Fields pass through as written; the waypoint
 * validates them and NACKs what it cannot enforce.
 */
function backendPolicies(
  rules: readonly { metadata: { namespace: string }; raw: Raw }[],
  s: ServiceShape,
): Raw[] {
  const hosts = new Set([s.name, `${s.name}.${s.namespace}`, s.hostname]);
  return rules
    .filter(
      (r) => r.metadata.namespace === s.namespace && hosts.has(String(((r.raw.spec ?? {}) as Raw).host)),
    )
    .slice(0, 1)
    .map((r) => {
      const traffic = (((r.raw.spec ?? {}) as Raw).trafficPolicy ?? {}) as Raw;
      const pool = (traffic.connectionPool ?? {}) as { tcp?: Raw; http?: Raw };
      const od = (traffic.outlierDetection ?? {}) as Raw;
      const lb = ((traffic.loadBalancer ?? {}) as Raw).simple;
      const policy: Raw = { service: `${s.namespace}/${s.hostname}` };
      if (lb !== undefined) policy.loadBalancer = lb;
      const cb = defined({
        maxConnections: pool.tcp?.maxConnections,
        maxPendingRequests: pool.http?.http1MaxPendingRequests,
        maxRequests: pool.http?.http2MaxRequests,
      });
      if (Object.keys(cb).length > 0) policy.circuitBreaker = cb;
      const outlier = defined({
        consecutive5xx: od.consecutive5xxErrors,
        interval: od.interval,
        baseEjectionTime: od.baseEjectionTime,
        maxEjectionPercent: od.maxEjectionPercent,
      });
      if (Object.keys(outlier).length > 0) policy.outlierDetection = outlier;
      return policy;
    });
}
