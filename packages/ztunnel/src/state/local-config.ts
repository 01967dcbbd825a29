import {
  type Authorization,
  canonicalIp,
  err,
  FieldReader,
  type GatewayRef,
  ok,
  type Port,
  parseYamlText,
  type Result,
  readYamlFile,
  type Service,
  serviceKey,
  validateAuthorization,
  type Workload,
} from '@zmesh/shared';

/** An explicit-proxy forward listener: a local port that carries one workload's identity. */
export interface ForwardListener {
  workloadUid: string;
  listen: { host: string; port: number };
  destination: { host: string; port: number };
}

export interface LocalConfig {
  workloads: Workload[];
  services: Service[];
  forwards: ForwardListener[];
  /** istio.security.Authorization resources (validated). */
  policies: Authorization[];
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DEFAULT_TRUST_DOMAIN = 'cluster.local';

/**
 * The local YAML file: the same Workload and Service resources the control plane serves
 * (DESIGN §4), for running without one, plus this node's explicit-proxy forwards.
 * Never throws: an invalid file is refused with every reason, naming file and path.
 */
export async function loadLocalConfig(file: string): Promise<Result<LocalConfig>> {
  const doc = await readYamlFile(file);
  return doc.ok ? decodeLocalConfig(doc.value, file) : doc;
}

export function parseLocalConfig(text: string, source: string): Result<LocalConfig> {
  const doc = parseYamlText(text, source);
  return doc.ok ? decodeLocalConfig(doc.value, source) : doc;
}

function decodeLocalConfig(doc: unknown, source: string): Result<LocalConfig> {
  const r = new FieldReader(source);
  const root = r.object(doc ?? {}, '$');
  if (!root) return err(r.reasons);
  r.onlyKeys(root, '$', ['workloads', 'services', 'policies', 'forwards']);
  const workloads = (r.array(root.workloads, 'workloads') ?? []).flatMap(
    (w, i) => readWorkload(r, w, `workloads[${i}]`) ?? [],
  );
  const services = (r.array(root.services, 'services') ?? []).flatMap(
    (s, i) => readService(r, s, `services[${i}]`) ?? [],
  );
  const forwards = (r.array(root.forwards, 'forwards') ?? []).flatMap(
    (f, i) => readForward(r, f, `forwards[${i}]`) ?? [],
  );
  const policies = (r.array(root.policies, 'policies') ?? []).flatMap((p, i) => {
    const v = validateAuthorization(p, `policies[${i}]`);
    if (v.ok) return [v.value];
    for (const reason of v.error) r.reasons.push(`${source}: ${reason}`);
    return [];
  });
  checkUnique(
    r,
    workloads.map((w) => w.uid),
    'workloads',
    'uid',
  );
  checkUnique(r, services.map(serviceKey), 'services', 'namespace/hostname');
  const uids = new Set(workloads.map((w) => w.uid));
  forwards.forEach((f, i) => {
    if (!uids.has(f.workloadUid)) r.fail(`forwards[${i}].workload`, `no workload with uid ${f.workloadUid}`);
  });
  return r.reasons.length > 0 ? err(r.reasons) : ok({ workloads, services, forwards, policies });
}

function readWorkload(r: FieldReader, value: unknown, path: string): Workload | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  const known = ['uid', 'name', 'namespace', 'addresses', 'node', 'serviceAccount', 'trustDomain', 'network'];
  r.onlyKeys(o, path, [
    ...known,
    'tunnelProtocol',
    'services',
    'status',
    'authorizationPolicies',
    'labels',
    'waypoint',
  ]);
  const name = r.string(o.name, `${path}.name`, { pattern: DNS_LABEL });
  const namespace = r.string(o.namespace, `${path}.namespace`, { pattern: DNS_LABEL });
  const addresses = readAddresses(r, o.addresses, `${path}.addresses`);
  const services: Record<string, Port[]> = {};
  const svcMap = o.services === undefined ? {} : r.object(o.services, `${path}.services`);
  for (const [key, ports] of Object.entries(svcMap ?? {})) {
    services[key] = readPorts(r, ports, `${path}.services.${key}`);
  }
  const workload: Workload = {
    uid: r.string(o.uid, `${path}.uid`, { optional: true }) ?? `Kubernetes//Pod/${namespace}/${name}`,
    name: name ?? '',
    namespace: namespace ?? '',
    addresses,
    network: r.string(o.network, `${path}.network`, { optional: true }) ?? '',
    node: r.string(o.node, `${path}.node`) ?? '',
    trustDomain: r.string(o.trustDomain, `${path}.trustDomain`, { optional: true }) ?? DEFAULT_TRUST_DOMAIN,
    serviceAccount:
      r.string(o.serviceAccount, `${path}.serviceAccount`, { optional: true, pattern: DNS_LABEL }) ??
      'default',
    tunnelProtocol: r.oneOf(o.tunnelProtocol, `${path}.tunnelProtocol`, ['NONE', 'HBONE'] as const, 'HBONE'),
    services,
    authorizationPolicies: (r.array(o.authorizationPolicies, `${path}.authorizationPolicies`) ?? []).map(
      String,
    ),
    status: r.oneOf(o.status, `${path}.status`, ['HEALTHY', 'UNHEALTHY'] as const, 'HEALTHY'),
    canonicalName: name ?? '',
    canonicalRevision: 'latest',
    workloadName: name ?? '',
    clusterId: 'Kubernetes',
  };
  if (o.labels !== undefined) workload.labels = readLabels(r, o.labels, `${path}.labels`);
  if (o.waypoint !== undefined) workload.waypoint = readGatewayRef(r, o.waypoint, `${path}.waypoint`);
  return workload;
}

function readService(r: FieldReader, value: unknown, path: string): Service | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'hostname', 'addresses', 'ports', 'subjectAltNames', 'waypoint']);
  const name = r.string(o.name, `${path}.name`, { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { pattern: DNS_LABEL }) ?? '';
  const waypoint = o.waypoint === undefined ? undefined : readGatewayRef(r, o.waypoint, `${path}.waypoint`);
  return {
    ...(waypoint ? { waypoint } : {}),
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
    subjectAltNames: (r.array(o.subjectAltNames, `${path}.subjectAltNames`) ?? []).map(String),
  };
}

function readForward(r: FieldReader, value: unknown, path: string): ForwardListener | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['workload', 'listen', 'destination']);
  const workloadUid = r.string(o.workload, `${path}.workload`);
  const listen = readHostPort(r, o.listen, `${path}.listen`);
  const destination = readHostPort(r, o.destination, `${path}.destination`);
  if (!workloadUid || !listen || !destination) return undefined;
  return { workloadUid, listen, destination };
}

function readAddresses(r: FieldReader, value: unknown, path: string): string[] {
  return (r.array(value, path) ?? []).flatMap((a, i) => {
    const ip = typeof a === 'string' ? canonicalIp(a) : undefined;
    return ip ?? r.fail(`${path}[${i}]`, 'must be an IPv4 or IPv6 address') ?? [];
  });
}

function readPorts(r: FieldReader, value: unknown, path: string): Port[] {
  return (r.array(value, path) ?? []).flatMap((p, i) => {
    const o = r.object(p, `${path}[${i}]`);
    if (!o) return [];
    const servicePort = r.port(o.servicePort, `${path}[${i}].servicePort`);
    const targetPort =
      o.targetPort === undefined ? servicePort : r.port(o.targetPort, `${path}[${i}].targetPort`);
    return servicePort && targetPort ? [{ servicePort, targetPort }] : [];
  });
}

function readHostPort(
  r: FieldReader,
  value: unknown,
  path: string,
): { host: string; port: number } | undefined {
  const text = r.string(value, path);
  const m = text ? /^\[?([^\]]+?)\]?:(\d+)$/.exec(text) : null;
  const host = m ? canonicalIp(m[1]!) : undefined;
  if (!m || !host) return text ? r.fail(path, 'must be ip:port or [ipv6]:port') : undefined;
  const port = r.port(Number(m[2]), path);
  return port ? { host, port } : undefined;
}

/** Istio's GatewayAddress: `{ address: ip, hbonePort? }` or `{ hostname: { namespace, hostname }, hbonePort? }`. */
function readGatewayRef(r: FieldReader, value: unknown, path: string): GatewayRef | undefined {
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

function readLabels(r: FieldReader, value: unknown, path: string): Record<string, string> {
  const o = r.object(value, path) ?? {};
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, String(v)]));
}

function checkUnique(r: FieldReader, keys: string[], path: string, what: string): void {
  const seen = new Set<string>();
  for (const key of keys) {
    if (seen.has(key)) r.fail(path, `duplicate ${what} ${key}`);
    seen.add(key);
  }
}
