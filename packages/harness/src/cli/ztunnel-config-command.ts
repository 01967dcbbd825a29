import { adminRequest, isZmeshError, UsageError, ZmeshError } from '@zmesh/shared/cli';
import { type AdminOptions, type ProxyRow, target } from './operator-commands.js';
import { age, structured, table } from './table.js';

/** What `zmesh ztunnel-config` shows, as istioctl names it. */
const ZTUNNEL_CONFIG_KINDS = ['workloads', 'services', 'policies', 'certificates', 'connections'] as const;
export type ZtunnelConfigKind = (typeof ZTUNNEL_CONFIG_KINDS)[number];

export interface ZtunnelConfigOptions extends AdminOptions {
  /** One ztunnel's admin address; without it, every ztunnel the control plane knows. */
  ztunnel?: string;
  /** Only the ztunnels of these nodes (from the control plane). */
  node?: string[];
  output: 'table' | 'json' | 'yaml';
}

interface GatewayRef {
  hostname?: { namespace: string; hostname: string };
  address?: { address: string };
}

interface Connection {
  workload: string;
  direction: 'inbound' | 'outbound';
  local: string;
  remote: string;
  peer: string;
  protocol: string;
  since: number;
}

/** The parts of ztunnel's `GET /config_dump` these tables read. */
export interface ConfigDump {
  node?: string;
  workloads: Array<{
    name: string;
    namespace: string;
    addresses: string[];
    node: string;
    tunnelProtocol: string;
    status: string;
    trustDomain?: string;
    serviceAccount?: string;
    waypoint?: GatewayRef;
    services: Record<string, unknown>;
    authorizationPolicies?: string[];
  }>;
  services: Array<{
    name: string;
    namespace: string;
    hostname: string;
    addresses: Array<{ address: string }>;
    waypoint?: GatewayRef;
  }>;
  policies: {
    items: Array<{ name: string; namespace: string; action: string; scope: string; [k: string]: unknown }>;
  };
  certificates: Array<{ identity: string; notAfter?: string; roots?: number; failures: number }>;
  connections?: { total: number; items: Connection[] };
}

/** `zmesh x describe pod`'s argument: NAMESPACE/NAME, or NAME in default. */
export function podRef(ref: string): { namespace: string; name: string } {
  const m = /^(?:([a-z0-9-]+)\/)?([a-z0-9.-]+)$/.exec(ref);
  if (!m) throw new UsageError(`want NAMESPACE/NAME (or NAME in default), got ${JSON.stringify(ref)}`);
  return { namespace: m[1] ?? 'default', name: m[2] as string };
}

/** `--ztunnel`: HOST or HOST:PORT (port 15000 when absent), no scheme or path. */
export function ztunnelAddress(value: string): string {
  const m = /^(\[[0-9a-fA-F:.]+\]|[\w.-]+)(?::(\d{1,5}))?$/.exec(value);
  const port = Number(m?.[2] ?? 15000);
  if (!m || port < 1 || port > 65535)
    throw new UsageError(`--ztunnel wants HOST or HOST:PORT (127.0.0.1:15000), got ${JSON.stringify(value)}`);
  return `${m[1]}:${port}`;
}

/** Where a ztunnel's admin answers, and the node it serves (when the control plane said). */
interface ZtunnelRef {
  node: string;
  admin: string;
}

/** Without --ztunnel and --node, and no control plane to ask: the ztunnel on this host's loopback. */
const LOCAL_ZTUNNEL = '127.0.0.1:15000';

/**
 * The ztunnels to read: `--ztunnel` alone, else every connected ztunnel the control plane
 * knows with an announced admin address (its proxy-status), narrowed by `--node`. Without
 * `--node`, an unreachable control plane (or one that knows none) leaves the local one.
 */
async function ztunnelsToRead(opts: ZtunnelConfigOptions): Promise<ZtunnelRef[] | undefined> {
  if (opts.ztunnel !== undefined) {
    if (opts.node?.length) throw new UsageError('--ztunnel and --node exclude each other');
    return undefined;
  }
  const nodes = opts.node ?? [];
  let proxies: ProxyRow[];
  try {
    const res = await adminRequest(await target(opts), '/proxy-status');
    if (!res.ok)
      throw new ZmeshError('ZM_ERR_ADMIN_UNREACHABLE', { admin: opts.admin, reason: `HTTP ${res.status}` });
    proxies = res.json<ProxyRow[]>();
  } catch (e) {
    if (nodes.length === 0 && isZmeshError(e) && e.code === 'ZM_ERR_ADMIN_UNREACHABLE') return undefined;
    throw e;
  }
  const known = proxies.filter((p) => p.connected && p.admin && p.proxy.startsWith('ztunnel~'));
  const picked = known.filter((p) => nodes.length === 0 || nodes.includes(p.node));
  if (nodes.length === 0) return picked.length === 0 ? undefined : refs(picked);
  const missing = nodes.filter((n) => !picked.some((p) => p.node === n));
  if (missing.length > 0)
    throw new ZmeshError('ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE', {
      admin: `of node ${missing.join(', ')}`,
      reason: `the control plane knows no connected ztunnel there with an admin address (nodes it knows: ${[...new Set(known.map((p) => p.node))].sort().join(', ') || 'none'})`,
    });
  return refs(picked);
}

function refs(proxies: ProxyRow[]): ZtunnelRef[] {
  return proxies
    .map((p) => ({ node: p.node, admin: p.admin as string }))
    .sort((a, b) => a.node.localeCompare(b.node) || a.admin.localeCompare(b.admin));
}

/** One ztunnel's `/config_dump`, or ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE in one line. */
export async function readConfigDump(address: string): Promise<ConfigDump> {
  const admin = `http://${address}`;
  const fail = (reason: string) => new ZmeshError('ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE', { admin, reason });
  const res = await adminRequest({ admin }, '/config_dump').catch((e: unknown) => {
    throw isZmeshError(e) ? fail(String(e.context.reason ?? e.message)) : e;
  });
  if (!res.ok) throw fail(`/config_dump answered HTTP ${res.status}`);
  try {
    return res.json<ConfigDump>();
  } catch {
    throw fail('/config_dump is not JSON (is this a ztunnel admin port?)');
  }
}

function section(kind: ZtunnelConfigKind, dump: ConfigDump): unknown {
  if (kind === 'policies') return dump.policies?.items ?? [];
  if (kind === 'connections') return dump.connections?.items ?? [];
  return dump[kind] ?? [];
}

/**
 * `zmesh ztunnel-config KIND [--ztunnel ADDR | --node N…] [-o table|json|yaml]`: ztunnels'
 * views, read from their admin endpoints' `/config_dump` (istioctl's `ztunnel-config`).
 * With --ztunnel, json/yaml print that section of the dump as it is; read through the
 * control plane, `[{node, admin, items}]`, one entry per ztunnel. A ztunnel that cannot be
 * read is one line on stderr and exit 1; the others are still printed.
 */
export async function runZtunnelConfig(kind: ZtunnelConfigKind, opts: ZtunnelConfigOptions): Promise<number> {
  const many = await ztunnelsToRead(opts);
  if (many === undefined) {
    const dump = await readConfigDump(ztunnelAddress(opts.ztunnel ?? LOCAL_ZTUNNEL));
    console.log(
      opts.output === 'table' ? ztunnelConfigTable(kind, dump) : structured(section(kind, dump), opts.output),
    );
    warnTruncated(kind, [dump]);
    return 0;
  }
  const read = await Promise.all(
    many.map((z) =>
      readConfigDump(z.admin).then(
        (dump) => ({ ...z, dump }),
        (e: unknown) => {
          if (!isZmeshError(e)) throw e;
          console.error(`zmesh ztunnel-config: node ${z.node}: ${e.code}: ${e.message}`);
          return undefined;
        },
      ),
    ),
  );
  const ok = read.filter((r) => r !== undefined);
  if (opts.output === 'table') {
    if (ok.length > 0) console.log(ztunnelConfigTables(kind, ok));
  } else
    console.log(
      structured(
        ok.map((r) => ({ node: r.node, admin: r.admin, items: section(kind, r.dump) })),
        opts.output,
      ),
    );
  warnTruncated(
    kind,
    ok.map((r) => r.dump),
  );
  return ok.length === read.length ? 0 : 1;
}

function warnTruncated(kind: ZtunnelConfigKind, dumps: ConfigDump[]): void {
  if (kind !== 'connections') return;
  for (const d of dumps) {
    const c = d.connections;
    if (c && c.total > c.items.length)
      console.error(`node ${d.node ?? '?'}: ${c.items.length} of ${c.total} open connections listed`);
  }
}

/** Several ztunnels' tables as one, a ZTUNNEL column (the node it serves) first (exported for golden tests). */
export function ztunnelConfigTables(
  kind: ZtunnelConfigKind,
  dumps: Array<{ node: string; dump: ConfigDump }>,
  now = Date.now(),
): string {
  const { headers } = ztunnelConfigRows(kind, {} as ConfigDump, now);
  const rows = dumps.flatMap((d) => ztunnelConfigRows(kind, d.dump, now).rows.map((r) => [d.node, ...r]));
  return table(['ZTUNNEL', ...headers], rows);
}

function waypointOf(w: GatewayRef | undefined): string {
  if (!w) return '-';
  if (w.hostname) return `${w.hostname.namespace}/${w.hostname.hostname}`;
  return w.address?.address ?? '-';
}

/** The table `zmesh ztunnel-config KIND` prints for one ztunnel (exported for golden tests). */
export function ztunnelConfigTable(kind: ZtunnelConfigKind, dump: ConfigDump, now = Date.now()): string {
  const { headers, rows } = ztunnelConfigRows(kind, dump, now);
  return table(headers, rows);
}

function ztunnelConfigRows(
  kind: ZtunnelConfigKind,
  dump: ConfigDump,
  now: number,
): { headers: string[]; rows: string[][] } {
  const rowsOf = (headers: string[], rows: string[][]) => ({ headers, rows });
  const byName = <T extends { namespace: string; name: string }>(xs: T[] | undefined): T[] =>
    [...(xs ?? [])].sort((a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name));
  switch (kind) {
    case 'workloads':
      return rowsOf(
        ['NAMESPACE', 'NAME', 'IP', 'NODE', 'WAYPOINT', 'PROTOCOL'],
        byName(dump.workloads).map((w) => [
          w.namespace,
          w.name,
          w.addresses.join(',') || '-',
          w.node || '-',
          waypointOf(w.waypoint),
          w.tunnelProtocol,
        ]),
      );
    case 'services':
      return rowsOf(
        ['NAMESPACE', 'NAME', 'VIP', 'WAYPOINT', 'ENDPOINTS'],
        byName(dump.services).map((s) => {
          const key = `${s.namespace}/${s.hostname}`;
          const eps = (dump.workloads ?? []).filter((w) => key in (w.services ?? {}));
          const healthy = eps.filter((w) => w.status === 'HEALTHY').length;
          return [
            s.namespace,
            s.name,
            s.addresses.map((a) => a.address).join(',') || '-',
            waypointOf(s.waypoint),
            `${healthy}/${eps.length}`,
          ];
        }),
      );
    case 'policies':
      return rowsOf(
        ['NAMESPACE', 'NAME', 'ACTION', 'SCOPE'],
        byName(dump.policies?.items).map((p) => [p.namespace, p.name, p.action, p.scope]),
      );
    case 'certificates':
      return rowsOf(
        ['IDENTITY', 'STATE', 'NOT-AFTER', 'ROOTS'],
        [...(dump.certificates ?? [])]
          .sort((a, b) => a.identity.localeCompare(b.identity))
          .map((c) => {
            const state =
              c.notAfter === undefined
                ? c.failures > 0
                  ? `Pending (${c.failures} failed)`
                  : 'Pending'
                : Date.parse(c.notAfter) <= now
                  ? 'Expired'
                  : 'Valid';
            return [c.identity, state, c.notAfter ?? '-', String(c.roots ?? '-')];
          }),
      );
    case 'connections':
      return rowsOf(
        ['WORKLOAD', 'DIRECTION', 'LOCAL', 'REMOTE', 'PEER', 'PROTOCOL', 'AGE'],
        [...(dump.connections?.items ?? [])]
          .sort(
            (a, b) =>
              a.workload.localeCompare(b.workload) ||
              a.direction.localeCompare(b.direction) ||
              a.local.localeCompare(b.local) ||
              a.remote.localeCompare(b.remote),
          )
          .map((c) => [
            c.workload,
            c.direction,
            c.local,
            c.remote,
            c.peer || '-',
            c.protocol,
            age((now - c.since) / 1000),
          ]),
      );
  }
}
