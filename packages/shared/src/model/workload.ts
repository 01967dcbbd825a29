/**
 * zmesh's in-memory form of Istio's workload API (istio.workload.Address: Workload and
 * Service; field numbers in xds/proto/istio/workload/workload.proto). xDS decoding, the local YAML file and the
 * control plane's compiler all produce these; the data path reads only these. IPs are
 * canonical text (IPv4 dotted quad, IPv6 lowercase compressed); bytes exist only on the wire.
 */

export type TunnelProtocol = 'NONE' | 'HBONE';
export type WorkloadStatus = 'HEALTHY' | 'UNHEALTHY';
export type AppProtocol = 'UNKNOWN' | 'HTTP11' | 'HTTP2' | 'GRPC' | 'TCP' | 'TLS';

export interface Port {
  servicePort: number;
  targetPort: number;
  appProtocol?: AppProtocol;
}

export interface NetworkAddress {
  network: string;
  address: string;
}

/** Istio's GatewayAddress: where a waypoint (or network gateway) is reached. */
export interface GatewayRef {
  /** `namespace/hostname` of the waypoint's Service, when named by hostname. */
  hostname?: { namespace: string; hostname: string };
  address?: NetworkAddress;
  hbonePort: number;
}

export interface Workload {
  /** `cluster/group/kind/namespace/name`; the xDS resource name. */
  uid: string;
  name: string;
  namespace: string;
  addresses: string[];
  network: string;
  node: string;
  trustDomain: string;
  serviceAccount: string;
  tunnelProtocol: TunnelProtocol;
  waypoint?: GatewayRef;
  /** Key `namespace/hostname` → the ports this workload serves for that service. */
  services: Record<string, Port[]>;
  /** Selector policies that apply to this workload, `namespace/name`. */
  authorizationPolicies: string[];
  status: WorkloadStatus;
  canonicalName: string;
  canonicalRevision: string;
  workloadName: string;
  clusterId: string;
  /** Not on Istio's wire: zmesh tenancy label overrides; carried in an Extension. */
  labels?: Record<string, string>;
}

export interface Service {
  name: string;
  namespace: string;
  hostname: string;
  addresses: NetworkAddress[];
  ports: Port[];
  subjectAltNames: string[];
  waypoint?: GatewayRef;
}

/** xDS resource names: workloads by uid, services by `namespace/hostname`. */
export function serviceKey(service: Pick<Service, 'namespace' | 'hostname'>): string {
  return `${service.namespace}/${service.hostname}`;
}

/**
 * The workload's SPIFFE ID. Every proxied connection asks for two or three (pool key,
 * metric labels), so each distinct ID is built once and the same flat string is handed
 * out: a freshly concatenated one per call kept ~1 KiB of string trees per idle connection.
 */
export function spiffeIdOf(workload: Pick<Workload, 'trustDomain' | 'namespace' | 'serviceAccount'>): string {
  const key = `${workload.trustDomain}\u0000${workload.namespace}\u0000${workload.serviceAccount}`;
  let id = spiffeIds.get(key);
  if (id === undefined) {
    id = flat(`spiffe://${workload.trustDomain}/ns/${workload.namespace}/sa/${workload.serviceAccount}`);
    // Bounded: IDs come from configuration, but a long-lived process sees many come and go.
    if (spiffeIds.size >= SPIFFE_ID_CACHE) spiffeIds.clear();
    spiffeIds.set(key, id);
  }
  return id;
}

const SPIFFE_ID_CACHE = 10_000;
const spiffeIds = new Map<string, string>();

/** A concatenation as one flat string (V8 keeps `a + b` as a tree until something reads it whole). */
function flat(s: string): string {
  return Buffer.from(s, 'utf8').toString('utf8');
}
