/**
 * The Kubernetes and Istio object shapes the control plane reads (the subset it acts on).
 * Parsing keeps what compilation needs, already checked; AuthorizationPolicy, HTTPRoute and GRPCRoute
 * are kept raw for their own converters.
 */
export interface Meta {
  name: string;
  namespace: string;
  uid?: string;
  labels: Record<string, string>;
  /** Set by the store when the key is first committed (ISO-8601), kept through replacements. */
  creationTimestamp?: string;
}

export interface NamespaceObject {
  kind: 'Namespace';
  metadata: Meta;
}

export interface PodObject {
  kind: 'Pod';
  metadata: Meta;
  spec: { serviceAccountName: string; nodeName: string };
  /**
   * Canonical IP text; podIPs when given, else [podIP]. `ready`: the Pod's `Ready` condition
   * is True, present only when the Pod carries `status.conditions` (a kubelet's pod; YAML
   * configs have none). `terminating`: `metadata.deletionTimestamp` is set.
   */
  status: { podIPs: string[]; phase?: string; ready?: boolean; terminating?: boolean };
}

export interface ServicePortSpec {
  name?: string;
  port: number;
  targetPort: number;
  appProtocol?: string;
}

export interface ServiceObject {
  kind: 'Service';
  metadata: Meta;
  spec: { clusterIPs: string[]; ports: ServicePortSpec[]; selector?: Record<string, string> };
}

/** One endpoint of an EndpointSlice, its conditions as Kubernetes defines them. */
export interface SliceEndpoint {
  /** Canonical IP text. */
  addresses: string[];
  /** Absent (nil) means true, as Kubernetes says. */
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  /** `namespace/name` when targetRef names a Pod. */
  pod?: string;
  node?: string;
}

/**
 * `discovery.k8s.io/v1` EndpointSlice of a Service (label `kubernetes.io/service-name`). FQDN
 * slices carry no IP endpoints and are kept empty.
 */
export interface EndpointSliceObject {
  kind: 'EndpointSlice';
  metadata: Meta;
  spec: {
    service: string;
    ports: Array<{ name: string; port: number }>;
    endpoints: SliceEndpoint[];
  };
}

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

export interface ServiceAccountObject {
  kind: 'ServiceAccount';
  metadata: Meta;
}

export interface GatewayObject {
  kind: 'Gateway';
  metadata: Meta;
  spec: { gatewayClassName: string; addresses: string[] };
  raw: Record<string, unknown>;
}

/** Kept raw for the authz converter. */
export interface AuthorizationPolicyObject {
  kind: 'AuthorizationPolicy';
  metadata: Meta;
  raw: Record<string, unknown>;
}

/** Kept raw for the waypoint's route compiler. */
export interface HttpRouteObject {
  kind: 'HTTPRoute';
  metadata: Meta;
  raw: Record<string, unknown>;
}

/** Gateway API GRPCRoute, kept raw for the waypoint's route compiler (as HTTPRoute). */
export interface GrpcRouteObject {
  kind: 'GRPCRoute';
  metadata: Meta;
  raw: Record<string, unknown>;
}

/** Istio DestinationRule, kept raw: the waypoint's backend policy (pool limits, outliers). */
export interface DestinationRuleObject {
  kind: 'DestinationRule';
  metadata: Meta;
  raw: Record<string, unknown>;
}

/** Istio RequestAuthentication (JWT), kept raw: the waypoint validates and enforces it. */
export interface RequestAuthenticationObject {
  kind: 'RequestAuthentication';
  metadata: Meta;
  raw: Record<string, unknown>;
}

/** Istio PeerAuthentication mTLS mode; UNSET inherits (workload → namespace → mesh → STRICT). */
export type MtlsMode = 'UNSET' | 'STRICT' | 'PERMISSIVE' | 'DISABLE';
export const MTLS_MODES: readonly MtlsMode[] = ['UNSET', 'STRICT', 'PERMISSIVE', 'DISABLE'];

/** Istio PeerAuthentication (security.istio.io/v1), checked (docs/peer-authentication.md). */
export interface PeerAuthenticationObject {
  kind: 'PeerAuthentication';
  metadata: Meta;
  spec: {
    /** matchLabels; absent: the whole namespace (the whole mesh in the root namespace). */
    selector?: Record<string, string>;
    mode: MtlsMode;
    /** Target (container) port → mode; only with a selector. */
    portLevelMtls: Record<number, MtlsMode>;
  };
}

export type StoreObject =
  | NamespaceObject
  | PodObject
  | ServiceObject
  | EndpointSliceObject
  | ServiceAccountObject
  | GatewayObject
  | AuthorizationPolicyObject
  | HttpRouteObject
  | GrpcRouteObject
  | DestinationRuleObject
  | RequestAuthenticationObject
  | PeerAuthenticationObject;

export type Kind = StoreObject['kind'];

export const KINDS: readonly Kind[] = [
  'Namespace',
  'Pod',
  'Service',
  'EndpointSlice',
  'ServiceAccount',
  'AuthorizationPolicy',
  'Gateway',
  'HTTPRoute',
  'GRPCRoute',
  'DestinationRule',
  'RequestAuthentication',
  'PeerAuthentication',
];

/** kubectl's short names. */
const SHORT_KINDS: Record<string, Kind> = {
  po: 'Pod',
  svc: 'Service',
  eps: 'EndpointSlice',
  ns: 'Namespace',
  sa: 'ServiceAccount',
  gtw: 'Gateway',
  dr: 'DestinationRule',
  pa: 'PeerAuthentication',
  ra: 'RequestAuthentication',
  ap: 'AuthorizationPolicy',
};

/**
 * A kind as an operator types it (or kubectl's short name: po, svc, eps, ns, sa, gtw, dr, pa, ra, ap) (`pod`, `Pods`, `authorizationpolicies`), or undefined;
 * `all` stands for every kind.
 */
export function resolveKind(text: string): Kind | 'all' | undefined {
  const t = text.toLowerCase();
  if (t === 'all') return 'all';
  const short = SHORT_KINDS[t];
  if (short !== undefined) return short;
  return KINDS.find((k) => {
    const l = k.toLowerCase();
    return t === l || t === `${l}s` || (l.endsWith('y') && t === `${l.slice(0, -1)}ies`);
  });
}

/** Identity of an object in the store: `Kind/namespace/name` (namespace empty for Namespace). */
export function objectKey(o: { kind: string; metadata: { namespace: string; name: string } }): string {
  return `${o.kind}/${o.metadata.namespace}/${o.metadata.name}`;
}

export const WAYPOINT_CLASS = 'istio-waypoint';
/** Gateway classes that make a waypoint: Istio's and zmesh's own (`zmesh install` prints its GatewayClass). */
export const WAYPOINT_CLASSES: readonly string[] = [WAYPOINT_CLASS, 'zmesh-waypoint'];

export function isWaypointClass(name: string): boolean {
  return WAYPOINT_CLASSES.includes(name);
}
/** Istio's label naming the waypoint (a Gateway of the same namespace) an object uses. */
export const USE_WAYPOINT_LABEL = 'istio.io/use-waypoint';
