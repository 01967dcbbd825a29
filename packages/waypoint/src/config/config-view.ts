import { canonicalIp, type Port, type Service, serviceKey, spiffeIdOf, type Workload } from '@zmesh/shared';
import { RouteTable } from '../route/route-table.js';
import {
  type BackendPolicy,
  defaultBackendPolicy,
  type JwtRule,
  type L7Policy,
  type WaypointConfig,
} from './waypoint-config.js';

/** Ports of the mesh's own listeners: never a destination, so a request cannot loop into a proxy. */
const RESERVED_PORTS = new Set([15000, 15001, 15006, 15008, 15020, 15021, 15053]);

/** What a CONNECT's :authority named: a service VIP:port, or one pod's IP:port. */
export type Destination =
  | { kind: 'service'; service: Service; port: Port }
  | { kind: 'workload'; workload: Workload; port: number; service?: Service };

/** One endpoint that can take a request: a workload and the port its app listens on. */
export interface Endpoint {
  workload: Workload;
  address: string;
  port: number;
  /** `address:port`: the outlier detector's and pool's key. */
  key: string;
}

/**
 * An immutable, indexed form of a WaypointConfig. setConfig builds a new one and swaps it
 * in one assignment, so a request sees one version from authority to endpoint.
 */
export class ConfigView {
  readonly config: WaypointConfig;
  readonly policies: readonly L7Policy[];
  readonly #byVip = new Map<string, Service>();
  readonly #byName = new Map<string, Service>();
  readonly #byIp = new Map<string, Workload>();
  readonly #byIdentity = new Map<string, Workload>();
  readonly #endpoints = new Map<string, Workload[]>();
  readonly #endpointLists = new Map<string, readonly Endpoint[]>();
  readonly #routes = new Map<string, RouteTable>();
  readonly #backendPolicies = new Map<string, BackendPolicy>();
  readonly #jwtRules = new Map<string, readonly JwtRule[]>();
  readonly #jwtOutputs = new WeakMap<readonly JwtRule[], readonly string[]>();
  /**
   * Route backends (backendRefs and RequestMirrors) that name no service here, as
   * `route#rule -> namespace/name`: Gateway API's ResolvedRefs=False (BackendNotFound). The
   * route is kept; requests its weight sends there get 500.
   */
  readonly unresolvedBackends: readonly string[];

  constructor(config: WaypointConfig) {
    this.config = config;
    this.policies = config.policies;
    for (const s of config.services) {
      this.#byName.set(`${s.namespace}/${s.name}`, s);
      for (const a of s.addresses) this.#byVip.set(a.address, s);
    }
    for (const w of config.workloads) {
      for (const ip of w.addresses) this.#byIp.set(ip, w);
      this.#byIdentity.set(spiffeIdOf(w), w);
      for (const key of Object.keys(w.services))
        this.#endpoints.set(key, [...(this.#endpoints.get(key) ?? []), w]);
    }
    // GAMMA: a parentRef with a port binds the route to that service port only (MeshPorts).
    for (const s of config.services) {
      for (const { servicePort } of s.ports) {
        const attached = [...config.routes, ...config.grpcRoutes].filter((r) =>
          r.parentRefs.some(
            (p) =>
              p.namespace === s.namespace &&
              p.name === s.name &&
              (p.port === undefined || p.port === servicePort),
          ),
        );
        if (attached.length > 0)
          this.#routes.set(`${serviceKey(s)}:${servicePort}`, new RouteTable(attached));
      }
    }
    for (const p of config.backendPolicies) this.#backendPolicies.set(p.service, p);
    this.unresolvedBackends = [...config.routes, ...config.grpcRoutes].flatMap((route) =>
      route.rules.flatMap((rule, i) =>
        [...rule.backendRefs, ...(rule.filters?.mirrors ?? []).map((m) => m.backend)]
          .filter((b) => !this.#byName.has(`${b.namespace}/${b.name}`))
          .map((b) => `${route.namespace}/${route.name}#${i} -> ${b.namespace}/${b.name}`),
      ),
    );
  }

  destination(host: string, port: number): Destination | undefined {
    const ip = canonicalIp(host);
    if (ip === undefined || RESERVED_PORTS.has(port)) return undefined;
    const service = this.#byVip.get(ip);
    if (service) {
      const p = service.ports.find((x) => x.servicePort === port);
      return p ? { kind: 'service', service, port: p } : undefined;
    }
    const workload = this.#byIp.get(ip);
    if (!workload) return undefined;
    // A pod is served on the target ports of the services it backs, and only those.
    for (const [key, ports] of Object.entries(workload.services)) {
      if (!ports.some((p) => p.targetPort === port)) continue;
      const svc = this.serviceByKey(key);
      return svc ? { kind: 'workload', workload, port, service: svc } : { kind: 'workload', workload, port };
    }
    return undefined;
  }

  /** A workload with this SPIFFE ID (for metric labels only: several may share one). */
  workloadByIdentity(identity: string): Workload | undefined {
    return this.#byIdentity.get(identity);
  }

  /** Backend keys that exist in this config: service keys and `workload/<uid>`. */
  backendKeys(): Set<string> {
    return new Set([
      ...this.config.services.map(serviceKey),
      ...this.config.workloads.map((w) => `workload/${w.uid}`),
    ]);
  }

  serviceByKey(key: string): Service | undefined {
    const [ns, host] = key.split('/');
    return this.config.services.find((s) => s.namespace === ns && s.hostname === host);
  }

  serviceByName(namespace: string, name: string): Service | undefined {
    return this.#byName.get(`${namespace}/${name}`);
  }

  /** The routes attached to one port of a service (those whose parentRef names no port, or this one). */
  routes(service: Service, port: number): RouteTable | undefined {
    return this.#routes.get(`${serviceKey(service)}:${port}`);
  }

  backendPolicy(service: Service): BackendPolicy {
    const key = serviceKey(service);
    let policy = this.#backendPolicies.get(key);
    if (!policy) {
      policy = defaultBackendPolicy(key);
      this.#backendPolicies.set(key, policy);
    }
    return policy;
  }

  /**
   * The jwtRules of every RequestAuthentication that applies to a request for `service`
   * (`namespace/name`): those targeting this waypoint, and those targeting that service.
   */
  jwtRules(service: string | undefined): readonly JwtRule[] {
    const key = service ?? '';
    let rules = this.#jwtRules.get(key);
    if (!rules) {
      rules = this.config.requestAuthentications
        .filter((a) => !a.targetServices || (service !== undefined && a.targetServices.includes(service)))
        .flatMap((a) => a.rules);
      this.#jwtRules.set(key, rules);
    }
    return rules;
  }

  /** Headers the rules write (outputPayloadToHeader, outputClaimToHeaders): a client's copies are dropped. */
  jwtOutputHeaders(rules: readonly JwtRule[]): readonly string[] {
    let out = this.#jwtOutputs.get(rules);
    if (!out) {
      out = [
        ...new Set(
          rules.flatMap((r) => [
            ...(r.outputPayloadToHeader ? [r.outputPayloadToHeader] : []),
            ...r.outputClaimToHeaders.map((c) => c.header),
          ]),
        ),
      ];
      this.#jwtOutputs.set(rules, out);
    }
    return out;
  }

  /**
   * The healthy endpoints of a service port. The view never changes, so each list is
   * built once (not per request) and shared: callers must not modify it.
   */
  endpoints(service: Service, servicePort: number): readonly Endpoint[] {
    const key = serviceKey(service);
    const cacheKey = `${key}|${servicePort}`;
    let list = this.#endpointLists.get(cacheKey);
    if (!list) {
      list = this.#buildEndpoints(service, key, servicePort);
      this.#endpointLists.set(cacheKey, list);
    }
    return list;
  }

  #buildEndpoints(service: Service, key: string, servicePort: number): Endpoint[] {
    const svcPort = service.ports.find((p) => p.servicePort === servicePort);
    return (this.#endpoints.get(key) ?? []).flatMap((w) => {
      if (w.status !== 'HEALTHY' || w.addresses.length === 0) return [];
      const target =
        w.services[key]?.find((p) => p.servicePort === servicePort)?.targetPort ?? svcPort?.targetPort;
      return target === undefined ? [] : [endpointOf(w, target)];
    });
  }
}

export function endpointOf(workload: Workload, port: number): Endpoint {
  const address = workload.addresses[0]!;
  return {
    workload,
    address,
    port,
    key: address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`,
  };
}
