import { adminRequest, isZmeshError, UsageError, ZmeshError } from '@zmesh/shared/cli';
import { structured, table } from './table.js';

/** What `zmesh ztunnel-config` shows, as istioctl names it. */
const ZTUNNEL_CONFIG_KINDS = ['workloads', 'services', 'policies', 'certificates'] as const;
export type ZtunnelConfigKind = (typeof ZTUNNEL_CONFIG_KINDS)[number];

export interface ZtunnelConfigOptions {
  ztunnel: string;
  output: 'table' | 'json' | 'yaml';
}

interface GatewayRef {
  hostname?: { namespace: string; hostname: string };
  address?: { address: string };
}

/** The parts of ztunnel's `GET /config_dump` these tables read. */
export interface ConfigDump {
  workloads: Array<{
    name: string;
    namespace: string;
    addresses: string[];
    node: string;
    tunnelProtocol: string;
    status: string;
    waypoint?: GatewayRef;
    services: Record<string, unknown>;
  }>;
  services: Array<{
    name: string;
    namespace: string;
    hostname: string;
    addresses: Array<{ address: string }>;
    waypoint?: GatewayRef;
  }>;
  policies: { items: Array<{ name: string; namespace: string; action: string; scope: string }> };
  certificates: Array<{ identity: string; notAfter?: string; roots?: number; failures: number }>;
}

/** `--ztunnel`: HOST or HOST:PORT (port 15000 when absent), no scheme or path. */
function ztunnelAddress(value: string): string {
  const m = /^(\[[0-9a-fA-F:.]+\]|[\w.-]+)(?::(\d{1,5}))?$/.exec(value);
  const port = Number(m?.[2] ?? 15000);
  if (!m || port < 1 || port > 65535)
    throw new UsageError(`--ztunnel wants HOST or HOST:PORT (127.0.0.1:15000), got ${JSON.stringify(value)}`);
  return `${m[1]}:${port}`;
}

/**
 * `zmesh ztunnel-config KIND [--ztunnel ADDR] [-o table|json|yaml]`: one ztunnel's view,
 * read from its admin endpoint's `/config_dump` (istioctl's `ztunnel-config`). json/yaml
 * print that section of the dump as it is.
 */
export async function runZtunnelConfig(kind: ZtunnelConfigKind, opts: ZtunnelConfigOptions): Promise<number> {
  const admin = `http://${ztunnelAddress(opts.ztunnel)}`;
  const fail = (reason: string) => new ZmeshError('ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE', { admin, reason });
  const res = await adminRequest({ admin }, '/config_dump').catch((e: unknown) => {
    throw isZmeshError(e) ? fail(String(e.context.reason ?? e.message)) : e;
  });
  if (!res.ok) throw fail(`/config_dump answered HTTP ${res.status}`);
  let dump: ConfigDump;
  try {
    dump = res.json<ConfigDump>();
  } catch {
    throw fail('/config_dump is not JSON (is this a ztunnel admin port?)');
  }
  if (opts.output !== 'table') {
    const section = kind === 'policies' ? dump.policies?.items : dump[kind];
    console.log(structured(section ?? [], opts.output));
    return 0;
  }
  console.log(ztunnelConfigTable(kind, dump));
  return 0;
}

function waypointOf(w: GatewayRef | undefined): string {
  if (!w) return '-';
  if (w.hostname) return `${w.hostname.namespace}/${w.hostname.hostname}`;
  return w.address?.address ?? '-';
}

/** The table `zmesh ztunnel-config KIND` prints (exported for golden tests). */
export function ztunnelConfigTable(kind: ZtunnelConfigKind, dump: ConfigDump, now = Date.now()): string {
  const byName = <T extends { namespace: string; name: string }>(xs: T[] | undefined): T[] =>
    [...(xs ?? [])].sort((a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name));
  switch (kind) {
    case 'workloads':
      return table(
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
      return table(
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
      return table(
        ['NAMESPACE', 'NAME', 'ACTION', 'SCOPE'],
        byName(dump.policies?.items).map((p) => [p.namespace, p.name, p.action, p.scope]),
      );
    case 'certificates':
      return table(
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
  }
}
