import type { AppProtocol, GatewayRef, Port, Service, Workload } from '../model/workload.js';
import { canonicalIp } from '../net/ip.js';
import type { FieldReader } from './field-reader.js';

/**
 * Readers for the shared model's Workload and Service written as YAML/JSON (ztunnel's local
 * file, the waypoint's file and xDS payload): one decoder, so both proxies accept the same
 * shape and report the same reasons.
 */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** Kubernetes service-account names are DNS-1123 subdomains. */
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
export const DEFAULT_TRUST_DOMAIN = 'cluster.local';
const APP_PROTOCOLS: readonly AppProtocol[] = ['UNKNOWN', 'HTTP11', 'HTTP2', 'GRPC', 'TCP', 'TLS'];

export function readWorkload(
  r: FieldReader,
  value: unknown,
  path: string,
  opts: { requireNode: boolean },
): Workload | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, [
    ...['uid', 'name', 'namespace', 'addresses', 'node', 'serviceAccount', 'trustDomain', 'network'],
    ...['tunnelProtocol', 'services', 'status', 'authorizationPolicies', 'labels', 'waypoint'],
  ]);
  const name = r.string(o.name, `${path}.name`, { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { pattern: DNS_LABEL }) ?? '';
  const services: Record<string, Port[]> = {};
  for (const [key, ports] of Object.entries(r.optionalObject(o.services, `${path}.services`) ?? {})) {
    services[key] = readPorts(r, ports, `${path}.services.${key}`);
  }
  const sa = { optional: true, pattern: DNS_SUBDOMAIN };
  const workload: Workload = {
    uid: r.string(o.uid, `${path}.uid`, { optional: true }) ?? `Kubernetes//Pod/${namespace}/${name}`,
    name,
    namespace,
    addresses: readAddresses(r, o.addresses, `${path}.addresses`),
    network: r.string(o.network, `${path}.network`, { optional: true }) ?? '',
    node: r.string(o.node, `${path}.node`, { optional: !opts.requireNode }) ?? '',
    trustDomain: r.string(o.trustDomain, `${path}.trustDomain`, { optional: true }) ?? DEFAULT_TRUST_DOMAIN,
    serviceAccount: r.string(o.serviceAccount, `${path}.serviceAccount`, sa) ?? 'default',
    tunnelProtocol: r.oneOf(o.tunnelProtocol, `${path}.tunnelProtocol`, ['NONE', 'HBONE'] as const, 'HBONE'),
    services,
    authorizationPolicies: r.array(o.authorizationPolicies, `${path}.authorizationPolicies`).map(String),
    status: r.oneOf(o.status, `${path}.status`, ['HEALTHY', 'UNHEALTHY'] as const, 'HEALTHY'),
    canonicalName: name,
    canonicalRevision: 'latest',
    workloadName: name,
    clusterId: 'Kubernetes',
  };
  if (o.labels !== undefined) workload.labels = readLabels(r, o.labels, `${path}.labels`);
  if (o.waypoint !== undefined) workload.waypoint = readGatewayRef(r, o.waypoint, `${path}.waypoint`);
  return workload;
}

export function readService(r: FieldReader, value: unknown, path: string): Service | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'hostname', 'addresses', 'ports', 'subjectAltNames', 'waypoint']);
  const name = r.string(o.name, `${path}.name`, { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { pattern: DNS_LABEL }) ?? '';
  const service: Service = {
    name,
    namespace,
    hostname:
      r.string(o.hostname, `${path}.hostname`, { optional: true }) ??
      `${name}.${namespace}.svc.cluster.local`,
    addresses: readAddresses(r, o.addresses, `${path}.addresses`).map((address) => ({
      network: '',
      address,
    })),
    ports: readPorts(r, o.ports, `${path}.ports`),
    subjectAltNames: r.strings(o.subjectAltNames, `${path}.subjectAltNames`) ?? [],
  };
  if (o.waypoint !== undefined) {
    const waypoint = readGatewayRef(r, o.waypoint, `${path}.waypoint`);
    if (waypoint) service.waypoint = waypoint;
  }
  return service;
}

export function readAddresses(r: FieldReader, value: unknown, path: string): string[] {
  return r.array(value, path).flatMap((a, i) => {
    const ip = typeof a === 'string' ? canonicalIp(a) : undefined;
    return ip ?? r.fail(`${path}[${i}]`, 'must be an IPv4 or IPv6 address') ?? [];
  });
}

/** Ports; `appProtocol` is kept only when given (the waypoint skips sniffing for `TCP`). */
export function readPorts(r: FieldReader, value: unknown, path: string): Port[] {
  return r.array(value, path).flatMap((p, i) => {
    const o = r.object(p, `${path}[${i}]`);
    if (!o) return [];
    r.onlyKeys(o, `${path}[${i}]`, ['servicePort', 'targetPort', 'appProtocol']);
    const servicePort = r.port(o.servicePort, `${path}[${i}].servicePort`);
    const targetPort =
      o.targetPort === undefined ? servicePort : r.port(o.targetPort, `${path}[${i}].targetPort`);
    if (!servicePort || !targetPort) return [];
    const port: Port = { servicePort, targetPort };
    if (o.appProtocol !== undefined) {
      port.appProtocol = r.oneOf(o.appProtocol, `${path}[${i}].appProtocol`, APP_PROTOCOLS, 'UNKNOWN');
    }
    return [port];
  });
}

/** Istio's GatewayAddress: `{ address: ip, hbonePort? }` or `{ hostname: { namespace, hostname }, hbonePort? }`. */
export function readGatewayRef(r: FieldReader, value: unknown, path: string): GatewayRef | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['address', 'hostname', 'hbonePort']);
  const hbonePort = o.hbonePort === undefined ? 15008 : r.port(o.hbonePort, `${path}.hbonePort`);
  if (hbonePort === undefined) return undefined;
  if (o.address !== undefined) {
    const ip = typeof o.address === 'string' ? canonicalIp(o.address) : undefined;
    if (!ip) return r.fail(`${path}.address`, 'must be an IPv4 or IPv6 address');
    return { address: { network: '', address: ip }, hbonePort };
  }
  const h = r.object(o.hostname, `${path}.hostname`);
  const namespace = h ? r.string(h.namespace, `${path}.hostname.namespace`) : undefined;
  const hostname = h ? r.string(h.hostname, `${path}.hostname.hostname`) : undefined;
  return namespace && hostname ? { hostname: { namespace, hostname }, hbonePort } : undefined;
}

export function readLabels(r: FieldReader, value: unknown, path: string): Record<string, string> {
  const o = r.object(value, path) ?? {};
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, String(v)]));
}

/** Records a reason for every key seen twice. */
export function checkUnique(r: FieldReader, keys: readonly string[], path: string, what: string): void {
  const seen = new Set<string>();
  for (const key of keys) {
    if (seen.has(key)) r.fail(path, `duplicate ${what} ${key}`);
    seen.add(key);
  }
}
