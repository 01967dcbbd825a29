import {
  canonicalIp,
  err,
  FieldReader,
  ok,
  type Port,
  parseYamlText,
  type Result,
  readYamlFile,
  type Service,
  serviceKey,
  type Workload,
} from '@zmesh/shared';
import { readBackendPolicy, readPolicy } from './policy-parser.js';
import { readRoute } from './route-parser.js';
import type { WaypointConfig } from './waypoint-config.js';

export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DEFAULT_TRUST_DOMAIN = 'cluster.local';
const ROOT_KEYS = [
  'waypoint',
  'workloads',
  'services',
  'httpRoutes',
  'authorizationPolicies',
  'backendPolicies',
];

export async function loadWaypointConfig(file: string): Promise<Result<WaypointConfig>> {
  const doc = await readYamlFile(file);
  return doc.ok ? decodeWaypointConfig(doc.value, file) : doc;
}

/** YAML text → config, or every reason it is refused. Never throws. */
export function parseWaypointConfig(text: string, source: string): Result<WaypointConfig> {
  const doc = parseYamlText(text, source);
  return doc.ok ? decodeWaypointConfig(doc.value, source) : doc;
}

/** A plain object (parsed YAML or JSON, or a control plane's compiled form) → config. */
export function decodeWaypointConfig(doc: unknown, source: string): Result<WaypointConfig> {
  const r = new FieldReader(source);
  const root = r.object(doc, '$');
  if (!root) return err(r.reasons);
  r.onlyKeys(root, '$', ROOT_KEYS);
  const self = r.object(root.waypoint ?? {}, 'waypoint') ?? {};
  r.onlyKeys(self, 'waypoint', ['name', 'namespace', 'trustDomain', 'serviceAccount']);
  const name = r.string(self.name, 'waypoint.name', { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(self.namespace, 'waypoint.namespace', { pattern: DNS_LABEL }) ?? '';
  const cfg: WaypointConfig = {
    name,
    namespace,
    trustDomain:
      r.string(self.trustDomain, 'waypoint.trustDomain', { optional: true }) ?? DEFAULT_TRUST_DOMAIN,
    serviceAccount: r.string(self.serviceAccount, 'waypoint.serviceAccount', { optional: true }) ?? name,
    workloads: r
      .array(root.workloads, 'workloads')
      .flatMap((w, i) => readWorkload(r, w, `workloads[${i}]`) ?? []),
    services: r.array(root.services, 'services').flatMap((s, i) => readService(r, s, `services[${i}]`) ?? []),
    routes: r
      .array(root.httpRoutes, 'httpRoutes')
      .flatMap((x, i) => readRoute(r, x, `httpRoutes[${i}]`, namespace) ?? []),
    policies: r
      .array(root.authorizationPolicies, 'authorizationPolicies')
      .flatMap((x, i) => readPolicy(r, x, `authorizationPolicies[${i}]`, { name, namespace }) ?? []),
    backendPolicies: r
      .array(root.backendPolicies, 'backendPolicies')
      .flatMap((x, i) => readBackendPolicy(r, x, `backendPolicies[${i}]`) ?? []),
  };
  checkReferences(r, cfg);
  return r.reasons.length > 0 ? err(r.reasons) : ok(cfg);
}

function checkReferences(r: FieldReader, cfg: WaypointConfig): void {
  unique(
    r,
    cfg.workloads.map((w) => w.uid),
    'workloads',
    'uid',
  );
  unique(r, cfg.services.map(serviceKey), 'services', 'namespace/hostname');
  const byName = new Set(cfg.services.map((s) => `${s.namespace}/${s.name}`));
  cfg.routes.forEach((route, i) => {
    route.parentRefs.forEach((p, j) => {
      if (!byName.has(`${p.namespace}/${p.name}`))
        r.fail(`httpRoutes[${i}].parentRefs[${j}]`, `no service ${p.namespace}/${p.name}`);
    });
    route.rules.forEach((rule, j) => {
      rule.backendRefs.forEach((b, k) => {
        if (!byName.has(`${b.namespace}/${b.name}`))
          r.fail(`httpRoutes[${i}].rules[${j}].backendRefs[${k}]`, `no service ${b.namespace}/${b.name}`);
      });
    });
  });
}

function unique(r: FieldReader, keys: string[], path: string, what: string): void {
  const seen = new Set<string>();
  for (const key of keys) {
    if (seen.has(key)) r.fail(path, `duplicate ${what} ${key}`);
    seen.add(key);
  }
}

function readWorkload(r: FieldReader, value: unknown, path: string): Workload | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(
    o,
    path,
    ['uid', 'name', 'namespace', 'addresses', 'node', 'serviceAccount', 'trustDomain'].concat([
      'network',
      'services',
      'status',
      'tunnelProtocol',
    ]),
  );
  const name = r.string(o.name, `${path}.name`, { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { pattern: DNS_LABEL }) ?? '';
  const services: Record<string, Port[]> = {};
  for (const [key, ports] of Object.entries(r.optionalObject(o.services, `${path}.services`) ?? {}))
    services[key] = readPorts(r, ports, `${path}.services.${key}`);
  return {
    uid: r.string(o.uid, `${path}.uid`, { optional: true }) ?? `Kubernetes//Pod/${namespace}/${name}`,
    name,
    namespace,
    addresses: readAddresses(r, o.addresses, `${path}.addresses`),
    network: r.string(o.network, `${path}.network`, { optional: true }) ?? '',
    node: r.string(o.node, `${path}.node`, { optional: true }) ?? '',
    trustDomain: r.string(o.trustDomain, `${path}.trustDomain`, { optional: true }) ?? DEFAULT_TRUST_DOMAIN,
    serviceAccount: r.string(o.serviceAccount, `${path}.serviceAccount`, { optional: true }) ?? 'default',
    tunnelProtocol: r.oneOf(o.tunnelProtocol, `${path}.tunnelProtocol`, ['NONE', 'HBONE'] as const, 'HBONE'),
    services,
    authorizationPolicies: [],
    status: r.oneOf(o.status, `${path}.status`, ['HEALTHY', 'UNHEALTHY'] as const, 'HEALTHY'),
    canonicalName: name,
    canonicalRevision: 'latest',
    workloadName: name,
    clusterId: 'Kubernetes',
  };
}

function readService(r: FieldReader, value: unknown, path: string): Service | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'hostname', 'addresses', 'ports', 'subjectAltNames']);
  const name = r.string(o.name, `${path}.name`, { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { pattern: DNS_LABEL }) ?? '';
  return {
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
}

function readAddresses(r: FieldReader, value: unknown, path: string): string[] {
  return r.array(value, path).flatMap((a, i) => {
    const ip = typeof a === 'string' ? canonicalIp(a) : undefined;
    return ip ?? r.fail(`${path}[${i}]`, 'must be an IPv4 or IPv6 address') ?? [];
  });
}

function readPorts(r: FieldReader, value: unknown, path: string): Port[] {
  const protocols = ['UNKNOWN', 'HTTP11', 'HTTP2', 'GRPC', 'TCP', 'TLS'] as const;
  return r.array(value, path).flatMap((p, i) => {
    const o = r.object(p, `${path}[${i}]`);
    if (!o) return [];
    r.onlyKeys(o, `${path}[${i}]`, ['servicePort', 'targetPort', 'appProtocol']);
    const servicePort = r.port(o.servicePort, `${path}[${i}].servicePort`);
    const targetPort =
      o.targetPort === undefined ? servicePort : r.port(o.targetPort, `${path}[${i}].targetPort`);
    const appProtocol = r.oneOf(o.appProtocol, `${path}[${i}].appProtocol`, protocols, 'UNKNOWN');
    return servicePort && targetPort ? [{ servicePort, targetPort, appProtocol }] : [];
  });
}
