import type { AppProtocol, Authorization, GatewayRef, Port, Service, Workload } from '@zmesh/shared';
import { objectsOf, type StoreView } from './config-store.js';
import {
  type AuthorizationPolicyObject,
  type EndpointSliceObject,
  type GatewayObject,
  isWaypointClass,
  type NamespaceObject,
  type PeerAuthenticationObject,
  type PodObject,
  type ServiceObject,
  USE_WAYPOINT_LABEL,
} from './k8s-objects.js';
import { PeerAuthentications } from './peer-authentication.js';

export { USE_WAYPOINT_LABEL };

import { compileWaypointConfigs, type WaypointResource } from './waypoint-configs.js';

/** Istio's labels (istio.io/latest/docs/ambient). */
export const DATAPLANE_MODE_LABEL = 'istio.io/dataplane-mode';
/** Set by Istio on a waypoint's own pods; they never go through a waypoint themselves. */
export const GATEWAY_NAME_LABEL = 'gateway.networking.k8s.io/gateway-name';
export const HBONE_PORT = 15008;
/** Only labels under this prefix reach proxies (tenancy overrides, docs/design.md §7). */
const ZMESH_LABEL_PREFIX = 'zmesh.io/';

export interface CompilerOptions {
  trustDomain: string;
  clusterDomain?: string;
  clusterId?: string;
  /** Converts a raw AuthorizationPolicy; undefined drops it (the authz helper supplies this). */
  convertPolicy?: (raw: Record<string, unknown>) => Authorization | undefined;
  /** Istio's root namespace: its selector-less PeerAuthentication is mesh-wide. Default istio-system. */
  rootNamespace?: string;
}

export interface CompiledConfig {
  workloads: Workload[];
  services: Service[];
  authorizations: Authorization[];
  /** One per waypoint Gateway (docs/xds.md, "Waypoint config"); absent: none served. */
  waypoints?: WaypointResource[];
}

/** Compiles the store into the resources served over xDS. Pure: same view, same output. */
export function compile(view: StoreView, opts: CompilerOptions): CompiledConfig {
  return new Compiler(opts).compile(view);
}

/**
 * Compiles incrementally: store objects are immutable and shared between views, so a pod
 * whose own object, namespace and the selector-bearing objects (services, gateways,
 * policies) are unchanged keeps its compiled Workload — same object, so the server's
 * encoding memo applies too. One pod's change costs O(pods) map work, not a recompile.
 */
export class Compiler {
  readonly #opts: CompilerOptions;
  readonly #hostnameOf: (name: string, ns: string) => string;
  readonly #pods = new WeakMap<
    PodObject,
    { ns: NamespaceObject | undefined; deps: object; slices: string; workload: Workload }
  >();
  readonly #services = new WeakMap<object, { ns: NamespaceObject | undefined; service: Service }>();
  readonly #policies = new WeakMap<AuthorizationPolicyObject, Authorization | undefined>();
  #peerAuthMemo: { deps: object; value: PeerAuthentications } | undefined;
  #deps: { objects: readonly object[]; token: object } = { objects: [], token: {} };

  constructor(opts: CompilerOptions) {
    this.#opts = opts;
    const domain = opts.clusterDomain ?? 'cluster.local';
    this.#hostnameOf = (name, ns) => `${name}.${ns}.svc.${domain}`;
  }

  compile(view: StoreView): CompiledConfig {
    const namespaces = new Map(objectsOf(view, 'Namespace').map((n) => [n.metadata.name, n]));
    const kubeServices = objectsOf(view, 'Service');
    const gateways = objectsOf(view, 'Gateway').filter((g) => isWaypointClass(g.spec.gatewayClassName));
    const policies = objectsOf(view, 'AuthorizationPolicy');
    const services = [
      ...kubeServices.map((s) =>
        this.#service(s, namespaces, () => compileService(s, namespaces, this.#hostnameOf)),
      ),
      ...gateways.map((g) => this.#service(g, namespaces, () => waypointService(g, this.#hostnameOf))),
    ];
    const peerAuthObjects = objectsOf(view, 'PeerAuthentication');
    const deps = this.#depsToken([...kubeServices, ...gateways, ...policies, ...peerAuthObjects]);
    const peerAuth = this.#peerAuth(peerAuthObjects, deps);
    let ctx: PodContext | undefined;
    const pods = objectsOf(view, 'Pod');
    const slices = sliceEndpoints(objectsOf(view, 'EndpointSlice'), kubeServices, pods, this.#hostnameOf);
    const workloads = pods.map((pod) => {
      const ns = namespaces.get(pod.metadata.namespace);
      const memo = this.#pods.get(pod);
      const facts = slices.podFacts(pod);
      if (memo && memo.ns === ns && memo.deps === deps && memo.slices === facts.key) return memo.workload;
      ctx ??= podContext(
        namespaces,
        kubeServices,
        gateways,
        policies,
        peerAuth,
        this.#hostnameOf,
        this.#opts,
      );
      const workload = compilePod(pod, ctx, facts);
      this.#pods.set(pod, { ns, deps, slices: facts.key, workload });
      return workload;
    });
    workloads.push(
      ...slices.plain.map((p) =>
        plainWorkload(p, this.#opts.trustDomain, this.#opts.clusterId ?? 'Kubernetes'),
      ),
    );
    const authorizations = policies.flatMap((p) => {
      if (!this.#policies.has(p)) this.#policies.set(p, this.#opts.convertPolicy?.(p.raw));
      const converted = this.#policies.get(p);
      return converted ? [converted] : [];
    });
    authorizations.push(...peerAuth.authorizations());
    const waypoints = compileWaypointConfigs({
      view,
      gateways,
      services,
      workloads,
      trustDomain: this.#opts.trustDomain,
      hostnameOf: this.#hostnameOf,
    });
    return { workloads, services, authorizations, waypoints };
  }

  #service(
    o: ServiceObject | GatewayObject,
    namespaces: Map<string, NamespaceObject>,
    build: () => Service,
  ): Service {
    const ns = namespaces.get(o.metadata.namespace);
    const memo = this.#services.get(o);
    if (memo && memo.ns === ns) return memo.service;
    const service = build();
    this.#services.set(o, { ns, service });
    return service;
  }

  /** The view's PeerAuthentications with the compiler's root namespace (`zmesh x describe pod`). */
  peerAuthentications(view: StoreView): PeerAuthentications {
    return new PeerAuthentications(
      objectsOf(view, 'PeerAuthentication'),
      this.#opts.rootNamespace ?? 'istio-system',
    );
  }

  /** Rebuilt only when a selector-bearing object changed (PeerAuthentications are among them). */
  #peerAuth(objects: readonly PeerAuthenticationObject[], deps: object): PeerAuthentications {
    if (this.#peerAuthMemo?.deps !== deps) {
      const value = new PeerAuthentications(objects, this.#opts.rootNamespace ?? 'istio-system');
      this.#peerAuthMemo = { deps, value };
    }
    return this.#peerAuthMemo.value;
  }

  /** A new token whenever any selector-bearing object is added, removed or replaced. */
  #depsToken(objects: readonly object[]): object {
    const prev = this.#deps.objects;
    if (prev.length !== objects.length || objects.some((o, i) => o !== prev[i])) {
      this.#deps = { objects, token: {} };
    }
    return this.#deps.token;
  }
}

interface PodContext {
  namespaces: Map<string, NamespaceObject>;
  /** `namespace/key=value` of a selector's first label → services with that selector. */
  selectorIndex: Map<string, ServiceObject[]>;
  gateways: Map<string, GatewayObject>;
  policies: Map<string, AuthorizationPolicyObject[]>;
  peerAuth: PeerAuthentications;
  hostnameOf: (name: string, ns: string) => string;
  opts: CompilerOptions;
}

function podContext(
  namespaces: Map<string, NamespaceObject>,
  services: ServiceObject[],
  gateways: GatewayObject[],
  policies: AuthorizationPolicyObject[],
  peerAuth: PeerAuthentications,
  hostnameOf: (name: string, ns: string) => string,
  opts: CompilerOptions,
): PodContext {
  const selectorIndex = new Map<string, ServiceObject[]>();
  for (const s of services) {
    const first = Object.entries(s.spec.selector ?? {})[0];
    if (first === undefined) continue;
    const key = `${s.metadata.namespace}/${first[0]}=${first[1]}`;
    selectorIndex.set(key, [...(selectorIndex.get(key) ?? []), s]);
  }
  const byNs = new Map<string, AuthorizationPolicyObject[]>();
  for (const p of policies) byNs.set(p.metadata.namespace, [...(byNs.get(p.metadata.namespace) ?? []), p]);
  return {
    namespaces,
    selectorIndex,
    gateways: new Map(gateways.map((g) => [`${g.metadata.namespace}/${g.metadata.name}`, g])),
    policies: byNs,
    peerAuth,
    hostnameOf,
    opts,
  };
}

/** What EndpointSlices say of one pod: its readiness, and selector-less Services it backs. */
interface PodSliceFacts {
  /** False when a slice lists the pod not ready. */
  ready: boolean;
  /** True when a slice lists the pod terminating. */
  terminating: boolean;
  services: Record<string, Port[]>;
  /** Equal facts, equal key (the pod memo's). */
  key: string;
}

/** An endpoint no pod stands behind, served as a plain (non-mesh) workload. */
interface PlainEndpoint {
  slice: EndpointSliceObject;
  address: string;
  node: string;
  healthy: boolean;
  services: Record<string, Port[]>;
}

const NO_SLICE_FACTS: PodSliceFacts = { ready: true, terminating: false, services: {}, key: '' };

/**
 * EndpointSlices (`discovery.k8s.io/v1`, by `kubernetes.io/service-name`) as Istio's ambient
 * controller reads them:
 * - an endpoint is sent new connections only when ready and not terminating (a terminating
 *   endpoint that still serves keeps its connections, takes no new ones); for the pod behind
 *   it, podStatus says which of the Pod's and the slice's conditions decide;
 * - a Service without a selector (slices managed by hand) gets its endpoints from its slices:
 *   a pod at that address serves it; an address no pod stands behind (and no Pod targetRef
 *   names) is a plain workload (tunnel NONE: ztunnel sends it plaintext, as to a pod outside
 *   the mesh), uid `cluster/discovery.k8s.io/EndpointSlice/ns/slice/ip`;
 * - a Service with a selector keeps its pods from the selector (YAML mode has no slices); its
 *   slices add only readiness, and addresses no pod stands behind, served plain.
 * A slice of no known Service is ignored. Targets: the slice port of the Service port's name.
 */
function sliceEndpoints(
  slices: readonly EndpointSliceObject[],
  services: readonly ServiceObject[],
  pods: readonly PodObject[],
  hostnameOf: (name: string, ns: string) => string,
): { podFacts: (pod: PodObject) => PodSliceFacts; plain: PlainEndpoint[] } {
  if (slices.length === 0) return { podFacts: () => NO_SLICE_FACTS, plain: [] };
  const byName = new Map(services.map((s) => [`${s.metadata.namespace}/${s.metadata.name}`, s]));
  const podAt = new Map<string, PodObject>();
  for (const p of pods) for (const ip of p.status.podIPs) podAt.set(`${p.metadata.namespace}/${ip}`, p);
  const facts = new Map<PodObject, Omit<PodSliceFacts, 'key'>>();
  const plain = new Map<string, PlainEndpoint>();
  for (const slice of slices) {
    const { namespace } = slice.metadata;
    const svc = byName.get(`${namespace}/${slice.spec.service}`);
    if (svc === undefined) continue;
    const svcKey = `${namespace}/${hostnameOf(svc.metadata.name, namespace)}`;
    const ports = svc.spec.ports.map((p) => ({
      servicePort: p.port,
      targetPort: slice.spec.ports.find((sp) => sp.name === (p.name ?? ''))?.port ?? p.targetPort,
    }));
    for (const ep of slice.spec.endpoints) {
      const healthy = ep.ready && !ep.terminating;
      for (const address of ep.addresses) {
        const pod = podAt.get(`${namespace}/${address}`);
        if (pod !== undefined) {
          const f = facts.get(pod) ?? { ready: true, terminating: false, services: {} };
          f.ready &&= ep.ready;
          f.terminating ||= ep.terminating;
          if (svc.spec.selector === undefined) f.services[svcKey] = ports;
          facts.set(pod, f);
          continue;
        }
        // A Pod not served yet (no IP, not scheduled): it will be, from the Pod itself.
        if (ep.pod !== undefined) continue;
        const key = `${namespace}/${address}`;
        const p = plain.get(key) ?? { slice, address, node: ep.node ?? '', healthy: true, services: {} };
        p.healthy &&= healthy;
        p.services[svcKey] = ports;
        plain.set(key, p);
      }
    }
  }
  return {
    podFacts: (pod) => {
      const f = facts.get(pod);
      return f === undefined ? NO_SLICE_FACTS : { ...f, key: JSON.stringify(f) };
    },
    plain: [...plain.values()],
  };
}

function plainWorkload(p: PlainEndpoint, trustDomain: string, clusterId: string): Workload {
  const { namespace, name } = p.slice.metadata;
  const service = p.slice.spec.service;
  return {
    uid: `${clusterId}/discovery.k8s.io/EndpointSlice/${namespace}/${name}/${p.address}`,
    name,
    namespace,
    addresses: [p.address],
    network: '',
    node: p.node,
    trustDomain,
    serviceAccount: 'default',
    tunnelProtocol: 'NONE',
    services: p.services,
    authorizationPolicies: [],
    status: p.healthy ? 'HEALTHY' : 'UNHEALTHY',
    canonicalName: service,
    canonicalRevision: 'latest',
    workloadName: service,
    clusterId,
  };
}

/**
 * Whether a pod's workload takes new connections (docs/kubernetes.md, "Endpoints"). The Pod is
 * the source, as in Istio's ambient controller (IsPodReady): when it carries conditions, its
 * `Ready` condition decides and a slice's `ready` for it is not read — the EndpointSlice
 * controller derives that from the same condition, only later, so a pod turns UNHEALTHY (or
 * HEALTHY again) as soon as kubelet says so, Service or not. A Pod without conditions (a YAML
 * config, no kubelet) is ready unless a slice lists it not ready. Either way a pod being deleted
 * (`deletionTimestamp`, or `terminating` in a slice) takes no new connections, and a phase
 * other than Running (Pending) is UNHEALTHY.
 */
function podStatus(pod: PodObject, slices: PodSliceFacts): Workload['status'] {
  const { phase, ready, terminating } = pod.status;
  if (phase !== undefined && phase !== 'Running') return 'UNHEALTHY';
  if (terminating === true || slices.terminating) return 'UNHEALTHY';
  return (ready ?? slices.ready) ? 'HEALTHY' : 'UNHEALTHY';
}

function compilePod(pod: PodObject, ctx: PodContext, slices: PodSliceFacts = NO_SLICE_FACTS): Workload {
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
    services: { ...podServices(pod, ctx), ...slices.services },
    authorizationPolicies: [
      ...(ctx.policies.get(namespace) ?? [])
        .filter((p) => policySelects(p, pod))
        .map((p) => `${namespace}/${p.metadata.name}`),
      // PeerAuthentication, folded in as Istio does; a waypoint's own pods take HBONE only.
      ...(ambient && !isWaypoint ? ctx.peerAuth.keysFor(pod) : []),
    ],
    status: podStatus(pod, slices),
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
  const { namespace, labels } = pod.metadata;
  for (const [k, v] of Object.entries(labels)) {
    for (const s of ctx.selectorIndex.get(`${namespace}/${k}=${v}`) ?? []) {
      if (!matches(s.spec.selector!, labels)) continue;
      out[`${namespace}/${ctx.hostnameOf(s.metadata.name, namespace)}`] = s.spec.ports.map((p) => ({
        servicePort: p.port,
        targetPort: p.targetPort,
      }));
    }
  }
  const gatewayName = labels[GATEWAY_NAME_LABEL];
  if (gatewayName !== undefined && ctx.gateways.has(`${namespace}/${gatewayName}`)) {
    out[`${namespace}/${ctx.hostnameOf(gatewayName, namespace)}`] = [
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
