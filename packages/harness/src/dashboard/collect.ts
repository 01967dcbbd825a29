import { type AdminTarget, adminRequest, spiffeIdOf, type Workload } from '@zmesh/shared';

/** One snapshot of the mesh, as the dashboard page draws it. */
export interface MeshView {
  at: string;
  controlPlane: { reachable: boolean; error?: string; generation?: number; objects?: number };
  ztunnels: ZtunnelView[];
  namespaces: Array<{ name: string; l7: boolean; waypoint?: string }>;
  workloads: Array<{ uid: string; name: string; namespace: string; node: string; identity: string }>;
  tunnels: TunnelView[];
  denials: Array<{ ztunnel: string; reason: string; count: number }>;
  /** Per-tenant fairness, per ztunnel and scheduler. */
  tenants: TenantView[];
}

interface TenantView {
  ztunnel: string;
  scheduler: string;
  tenant: string;
  queueDepth: number;
  admitted: number;
  refused: number;
  /** Mean seconds from enqueue to start. */
  meanDelaySeconds: number;
}

interface ZtunnelView {
  address: string;
  node?: string;
  reachable: boolean;
  ready: boolean;
  reasons: string[];
  /** From the control plane's proxy-status. */
  connected: boolean;
  lastContactSecondsAgo?: number;
  /** Version of the xDS snapshot the ztunnel serves from. */
  version?: unknown;
  /** Seconds until its earliest workload certificate expires. */
  certHorizonSeconds?: number;
}

interface TunnelView {
  source: string;
  destination: string;
  /** Connections open now (opened − closed, as the source's ztunnel counts them). */
  open: number;
  opened: number;
  sentBytes: number;
  receivedBytes: number;
  /** Set on an L7 edge a waypoint reports (istio_requests_total): the requests it carried. */
  via?: string;
  requests?: number;
}

interface ProxyReport {
  proxy: string;
  node: string;
  connected: boolean;
  lastContactSecondsAgo: number;
}

interface ConfigDump {
  node?: string;
  version?: unknown;
  workloads?: Workload[];
}

const FETCH_TIMEOUT_MS = 1500;

/** Collects the control plane's view and each ztunnel's; an unreachable part is shown as such. */
export async function collectMesh(
  admin: AdminTarget,
  ztunnels: readonly string[],
  waypoints: readonly string[] = [],
): Promise<MeshView> {
  const view: MeshView = {
    at: new Date().toISOString(),
    controlPlane: { reachable: false },
    ztunnels: [],
    namespaces: [],
    workloads: [],
    tunnels: [],
    denials: [],
    tenants: [],
  };
  let proxies: ProxyReport[] = [];
  const namespaces = new Set<string>();
  try {
    const objects = (await adminRequest(admin, '/objects')).json<{ generation: number; objects: string[] }>();
    proxies = (await adminRequest(admin, '/proxy-status')).json<ProxyReport[]>();
    view.controlPlane = { reachable: true, generation: objects.generation, objects: objects.objects.length };
    for (const key of objects.objects) {
      const [kind, ns, name] = key.split('/');
      if (kind === 'Namespace' && name) namespaces.add(name);
      else if (ns) namespaces.add(ns);
    }
  } catch (e) {
    view.controlPlane.error = (e as Error).message;
  }
  const workloads = new Map<string, Workload>();
  const tunnels = new Map<string, TunnelView>();
  await Promise.all(
    ztunnels.map(async (address) => {
      const z: ZtunnelView = { address, reachable: false, ready: false, reasons: [], connected: false };
      view.ztunnels.push(z);
      const [ready, dump, metrics] = await Promise.all([
        get(`http://${address}:15021/healthz/ready`),
        get(`http://${address}:15000/config_dump`),
        get(`http://${address}:15020/metrics`),
      ]);
      const r = parseJson<{ ready: boolean; reasons: string[] }>(ready?.text);
      if (r) {
        z.reachable = true;
        z.ready = r.ready === true;
        z.reasons = Array.isArray(r.reasons) ? r.reasons : [];
      }
      const d = parseJson<ConfigDump>(dump?.text);
      if (d) {
        z.node = d.node;
        z.version = d.version;
        for (const w of d.workloads ?? []) workloads.set(w.uid, w);
        const p = proxies.find((p) => p.node === d.node && p.proxy.includes('ztunnel'));
        const any = p ?? proxies.find((p) => p.node === d.node);
        if (any) {
          z.connected = any.connected;
          z.lastContactSecondsAgo = any.lastContactSecondsAgo;
        }
      }
      if (metrics) addMetrics(metrics.text, z, tunnels, view);
    }),
  );
  await Promise.all(
    waypoints.map(async (address) => {
      const metrics = await get(`http://${address}:15020/metrics`);
      if (metrics) addWaypointMetrics(metrics.text, address, tunnels);
    }),
  );
  view.ztunnels.sort((a, b) => a.address.localeCompare(b.address));
  const waypointOf = new Map<string, string>();
  for (const w of workloads.values()) {
    namespaces.add(w.namespace);
    if (w.waypoint)
      waypointOf.set(
        w.namespace,
        w.waypoint.hostname
          ? `${w.waypoint.hostname.namespace}/${w.waypoint.hostname.hostname}`
          : JSON.stringify(w.waypoint.address ?? w.waypoint),
      );
    view.workloads.push({
      uid: w.uid,
      name: w.name,
      namespace: w.namespace,
      node: w.node,
      identity: spiffeIdOf(w),
    });
  }
  view.workloads.sort((a, b) => a.uid.localeCompare(b.uid));
  view.namespaces = [...namespaces].sort().map((name) => {
    const waypoint = waypointOf.get(name);
    return waypoint ? { name, l7: true, waypoint } : { name, l7: false };
  });
  view.tunnels = [...tunnels.values()].sort((a, b) =>
    `${a.source}>${a.destination}`.localeCompare(`${b.source}>${b.destination}`),
  );
  return view;
}

function parseJson<T>(text: string | undefined): T | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

async function get(url: string): Promise<{ status: number; text: string } | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    return { status: res.status, text: await res.text() };
  } catch {
    return undefined;
  }
}

/** One Prometheus text sample: `name{a="b",…} value`. */
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(
  text: string,
): Array<{ name: string; labels: Record<string, string>; value: number }> {
  const out: Array<{ name: string; labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    const value = Number(m?.[3]);
    if (!m || (Number.isNaN(value) && m[3] !== 'NaN')) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, '$1');
    out.push({ name: m[1] as string, labels, value });
  }
  return out;
}

/**
 * Tunnels as the source's ztunnel reports them (istio_tcp_*{reporter="source"}), L4 denials,
 * the certificate horizon and per-tenant fairness.
 */
function addMetrics(text: string, z: ZtunnelView, tunnels: Map<string, TunnelView>, view: MeshView): void {
  const ztunnel = z.node ?? z.address;
  const tenants = new Map<string, TenantView & { delaySum: number; delayCount: number }>();
  const tenant = (labels: Record<string, string>) => {
    const key = `${labels.scheduler}\u0000${labels.tenant}`;
    let t = tenants.get(key);
    if (!t) {
      t = {
        ztunnel,
        scheduler: labels.scheduler ?? '',
        tenant: labels.tenant ?? '',
        queueDepth: 0,
        admitted: 0,
        refused: 0,
        meanDelaySeconds: 0,
        delaySum: 0,
        delayCount: 0,
      };
      tenants.set(key, t);
    }
    return t;
  };
  for (const s of parseMetrics(text)) {
    if (s.name === 'zmesh_authz_decisions_total' && s.labels.decision === 'deny' && s.value > 0) {
      view.denials.push({ ztunnel, reason: s.labels.reason ?? '', count: s.value });
      continue;
    }
    if (s.name === 'zmesh_cert_seconds_to_earliest_expiry') z.certHorizonSeconds = s.value;
    else if (s.name === 'zmesh_tenant_queue_depth') tenant(s.labels).queueDepth += s.value;
    else if (s.name === 'zmesh_tenant_admitted_total') tenant(s.labels).admitted += s.value;
    else if (s.name === 'zmesh_tenant_refused_total') tenant(s.labels).refused += s.value;
    else if (s.name === 'zmesh_tenant_scheduler_delay_seconds_sum') tenant(s.labels).delaySum += s.value;
    else if (s.name === 'zmesh_tenant_scheduler_delay_seconds_count') tenant(s.labels).delayCount += s.value;
    if (!s.name.startsWith('istio_tcp_') || s.labels.reporter !== 'source') continue;
    const source = `${s.labels.source_workload_namespace}/${s.labels.source_workload}`;
    const destination = `${s.labels.destination_workload_namespace}/${s.labels.destination_workload}`;
    if (!s.labels.destination_workload) continue;
    const key = `${source}>${destination}`;
    let t = tunnels.get(key);
    if (!t) {
      t = { source, destination, open: 0, opened: 0, sentBytes: 0, receivedBytes: 0 };
      tunnels.set(key, t);
    }
    if (s.name === 'istio_tcp_connections_opened_total') {
      t.opened += s.value;
      t.open += s.value;
    } else if (s.name === 'istio_tcp_connections_closed_total') t.open -= s.value;
    else if (s.name === 'istio_tcp_sent_bytes_total') t.sentBytes += s.value;
    else if (s.name === 'istio_tcp_received_bytes_total') t.receivedBytes += s.value;
  }
  for (const { delaySum, delayCount, ...t } of tenants.values()) {
    if (t.tenant === '') continue;
    view.tenants.push({ ...t, meanDelaySeconds: delayCount > 0 ? delaySum / delayCount : 0 });
  }
}

/** The requests a waypoint carried, source → destination workload (istio_requests_total). */
function addWaypointMetrics(text: string, waypoint: string, tunnels: Map<string, TunnelView>): void {
  for (const s of parseMetrics(text)) {
    if (s.name !== 'istio_requests_total') continue;
    const source = `${s.labels.source_workload_namespace}/${s.labels.source_workload}`;
    const destination = `${s.labels.destination_workload_namespace}/${s.labels.destination_workload}`;
    const key = `${source}>${destination}>${waypoint}`;
    let t = tunnels.get(key);
    if (!t) {
      t = {
        source,
        destination,
        open: 0,
        opened: 0,
        sentBytes: 0,
        receivedBytes: 0,
        via: waypoint,
        requests: 0,
      };
      tunnels.set(key, t);
    }
    t.requests = (t.requests ?? 0) + s.value;
  }
}
