import {
  canonicalIp,
  type GatewayRef,
  ipFamily,
  type Service,
  serviceKey,
  spiffeIdOf,
  type Workload,
  ZmeshError,
} from '@zmesh/shared';

export interface StateSnapshot {
  workloads: readonly Workload[];
  services: readonly Service[];
  /** Monotonic; bumps on every applied change. */
  version: number;
}

/** Where an outbound connection goes, decided from the destination address alone. */
export type Route =
  | {
      kind: 'hbone';
      /** Where the tunnel is dialled: the destination workload's or its waypoint's IP. */
      dial: { host: string; port: number };
      /** The CONNECT :authority. */
      authority: { host: string; port: number };
      /** SPIFFE IDs the server may present. */
      expectedIdentities: string[];
      destination: Workload;
      viaWaypoint: boolean;
    }
  | { kind: 'passthrough'; target: { host: string; port: number }; destination?: Workload };

/** HBONE port of a workload's ztunnel listener (docs/design.md §3 Ports). */
export const HBONE_PORT = 15008;

/**
 * An immutable view of the active configuration with its lookup indexes. A new
 * snapshot builds a new ProxyState and swaps it in one assignment, so a connection
 * sees one consistent version from resolve to dial.
 */
export class ProxyState {
  readonly version: number;
  private readonly byUid = new Map<string, Workload>();
  private readonly byIp = new Map<string, Workload>();
  private readonly byIdentity = new Map<string, Workload[]>();
  private readonly byServiceKey = new Map<string, Service>();
  private readonly byVip = new Map<string, Service>();
  /** Endpoints of a service, by service key. */
  private readonly endpoints = new Map<string, Workload[]>();

  constructor(snapshot: StateSnapshot) {
    this.version = snapshot.version;
    for (const w of snapshot.workloads) {
      this.byUid.set(w.uid, w);
      for (const ip of w.addresses) this.byIp.set(ip, w);
      const id = spiffeIdOf(w);
      this.byIdentity.set(id, [...(this.byIdentity.get(id) ?? []), w]);
      for (const key of Object.keys(w.services)) {
        const list = this.endpoints.get(key) ?? [];
        list.push(w);
        this.endpoints.set(key, list);
      }
    }
    for (const s of snapshot.services) {
      this.byServiceKey.set(serviceKey(s), s);
      for (const a of s.addresses) this.byVip.set(a.address, s);
    }
  }

  static empty(): ProxyState {
    return new ProxyState({ workloads: [], services: [], version: 0 });
  }

  workloads(): IterableIterator<Workload> {
    return this.byUid.values();
  }

  services(): IterableIterator<Service> {
    return this.byServiceKey.values();
  }

  workload(uid: string): Workload | undefined {
    return this.byUid.get(uid);
  }

  workloadByIp(ip: string): Workload | undefined {
    const c = canonicalIp(ip);
    return c === undefined ? undefined : this.byIp.get(c);
  }

  /** The workload behind an identity when exactly one has it (for metric labels only). */
  workloadByIdentity(identity: string): Workload | undefined {
    const list = this.byIdentity.get(identity);
    return list?.length === 1 ? list[0] : undefined;
  }

  serviceByVip(ip: string): Service | undefined {
    const c = canonicalIp(ip);
    return c === undefined ? undefined : this.byVip.get(c);
  }

  localWorkloads(node: string): Workload[] {
    return [...this.byUid.values()].filter((w) => w.node === node);
  }

  /**
   * Resolves an original destination to a route. A service VIP picks a healthy endpoint
   * (random choice: L4 load balancing); a destination with a waypoint goes to the
   * waypoint with the original destination as authority; an unresolved waypoint fails
   * closed (ZM_ERR_CONFIG_PENDING), it never routes around the missing piece.
   */
  resolve(host: string, port: number): Route | ZmeshError {
    const service = this.serviceByVip(host);
    if (service) return this.resolveService(service, host, port);
    const workload = this.workloadByIp(host);
    if (!workload) return { kind: 'passthrough', target: { host, port } };
    if (workload.waypoint)
      return this.viaWaypoint(`workload ${workload.uid}`, workload.waypoint, host, port, workload);
    return this.direct(workload, port, host);
  }

  private resolveService(service: Service, vip: string, port: number): Route | ZmeshError {
    const svcPort = service.ports.find((p) => p.servicePort === port);
    const key = serviceKey(service);
    if (!svcPort)
      return new ZmeshError('ZM_ERR_ROUTE_NO_DESTINATION', { address: `${service.hostname}:${port}` });
    const healthy = (this.endpoints.get(key) ?? []).filter(
      (w) => w.status === 'HEALTHY' && w.addresses.length > 0,
    );
    if (service.waypoint) return this.viaWaypoint(`service ${key}`, service.waypoint, vip, port, healthy[0]);
    if (healthy.length === 0) return new ZmeshError('ZM_ERR_ROUTE_NO_HEALTHY', { service: key });
    const endpoint = healthy[Math.floor(Math.random() * healthy.length)]!;
    const target =
      endpoint.services[key]?.find((p) => p.servicePort === port)?.targetPort ?? svcPort.targetPort;
    if (endpoint.waypoint)
      return this.viaWaypoint(`workload ${endpoint.uid}`, endpoint.waypoint, vip, port, endpoint);
    return this.direct(endpoint, target, vip);
  }

  /**
   * The endpoint address in the family the client asked for (the pod address itself, or
   * one of the VIP's family): an IPv6 connect goes over IPv6 end to end, so the app sees
   * the client's IPv6 address, not its IPv4 one.
   */
  private direct(workload: Workload, port: number, asked: string): Route {
    const host = sameFamilyAddress(workload, asked);
    if (workload.tunnelProtocol !== 'HBONE')
      return { kind: 'passthrough', target: { host, port }, destination: workload };
    return {
      kind: 'hbone',
      dial: { host, port: HBONE_PORT },
      authority: { host, port },
      expectedIdentities: [spiffeIdOf(workload)],
      destination: workload,
      viaWaypoint: false,
    };
  }

  private viaWaypoint(
    what: string,
    ref: GatewayRef,
    host: string,
    port: number,
    destination: Workload | undefined,
  ): Route | ZmeshError {
    const waypoint = this.waypointWorkload(ref);
    if (!waypoint) {
      const missing = ref.hostname
        ? `${ref.hostname.namespace}/${ref.hostname.hostname}`
        : (ref.address?.address ?? '?');
      return new ZmeshError('ZM_ERR_CONFIG_PENDING', { resource: what, missing: `waypoint ${missing}` });
    }
    return {
      kind: 'hbone',
      dial: { host: waypoint.addresses[0]!, port: ref.hbonePort || HBONE_PORT },
      authority: { host, port },
      expectedIdentities: [spiffeIdOf(waypoint)],
      destination: destination ?? waypoint,
      viaWaypoint: true,
    };
  }

  /** The waypoint's own workload: by address, or the first healthy endpoint of its service. */
  waypointWorkload(ref: GatewayRef): Workload | undefined {
    if (ref.address) return this.workloadByIp(ref.address.address);
    if (!ref.hostname) return undefined;
    const key = `${ref.hostname.namespace}/${ref.hostname.hostname}`;
    return (this.endpoints.get(key) ?? []).find((w) => w.status === 'HEALTHY' && w.addresses.length > 0);
  }
}

function sameFamilyAddress(workload: Workload, asked: string): string {
  const c = canonicalIp(asked);
  if (c !== undefined && workload.addresses.includes(c)) return c;
  const family = c === undefined ? undefined : ipFamily(c);
  return workload.addresses.find((a) => ipFamily(a) === family) ?? workload.addresses[0]!;
}
