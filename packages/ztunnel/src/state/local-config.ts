import {
  type Authorization,
  canonicalIp,
  checkUnique,
  err,
  FieldReader,
  ok,
  parseYamlText,
  type Result,
  readService,
  readWorkload,
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

/**
 * The local YAML file: the same Workload and Service resources the control plane serves
 * (docs/design.md §4), for running without one, plus this node's explicit-proxy forwards.
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
    (w, i) => readWorkload(r, w, `workloads[${i}]`, { requireNode: true }) ?? [],
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
