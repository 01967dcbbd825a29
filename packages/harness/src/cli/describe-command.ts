import { resolveKind } from '@zmesh/control-plane/kinds';
import { adminRequest, UsageError } from '@zmesh/shared/cli';
import { stringify } from 'yaml';
import {
  type AdminOptions,
  type ProxyRow,
  printRefusal,
  type Refusal,
  type RouteRow,
  target,
} from './operator-commands.js';
import { age, table } from './table.js';

interface Obj {
  kind: string;
  metadata: { name: string; namespace: string };
}
interface TypeDetail {
  state: string;
  nacked: { version: number; reason: string } | null;
  pending: { count: number; names: string[] };
  rejected: Array<{ name: string; reason: string }>;
}
interface WaypointRow {
  waypoint: string;
  users: number;
  ackedBy: string[];
  ready: boolean;
}

/** Does an xDS resource name stand for this object (`…/ns/name`, `ns/name`, `name.ns.svc…`)? */
function names(o: Obj, resource: string): boolean {
  const { namespace: ns, name } = o.metadata;
  return (
    resource === `${ns}/${name}` ||
    resource.endsWith(`/${ns}/${name}`) ||
    resource.startsWith(`${name}.${ns}.`)
  );
}

/** An event the control plane recorded (GET /events): a refused change, a waypoint (un)bound. */
export interface RecordedEvent {
  time: string;
  type: string;
  reason: string;
  from: string;
  message: string;
}

/**
 * The events `zmesh describe` lists for one object, as rows TYPE, REASON, AGE, FROM, MESSAGE:
 * first those the control plane recorded (refused, waypoint bound or unbound), oldest first;
 * then the state now, from proxy-status and waypoint-status: rejected (NACKed) or pending at
 * a proxy, a waypoint Gateway's readiness, and when none of those, that every connected
 * proxy is in sync (exported for golden tests).
 */
export function describeEvents(
  o: Obj,
  proxies: ProxyRow[],
  waypoints: WaypointRow[],
  recorded: RecordedEvent[] = [],
  now = Date.now(),
  routes: RouteRow[] = [],
): string[][] {
  return [
    ...recordedRows(recorded, now),
    ...[...currentEvents(o, proxies, waypoints), ...routeEvents(o, routes)].map(
      ([type, reason, from, message]) => [
        type as string,
        reason as string,
        '-',
        from as string,
        message as string,
      ],
    ),
  ];
}

/**
 * An HTTPRoute's or GRPCRoute's status now, per parent (`GET /route-status`): Normal for a
 * condition that holds, Warning with its reason (NoMatchingParent, BackendNotFound) for one
 * that does not; FROM is the parent.
 */
function routeEvents(o: Obj, routes: RouteRow[]): string[][] {
  const r = routes.find(
    (r) => r.kind === o.kind && r.namespace === o.metadata.namespace && r.name === o.metadata.name,
  );
  return (r?.parents ?? []).flatMap((p) =>
    p.conditions.map((c) => [
      c.status === 'True' ? 'Normal' : 'Warning',
      c.status === 'True' ? c.type : `${c.type}=${c.status}: ${c.reason}`,
      `${p.parentRef.kind} ${p.parentRef.namespace}/${p.parentRef.name}`,
      c.message,
    ]),
  );
}

function recordedRows(recorded: RecordedEvent[], now: number): string[][] {
  return recorded.map((e) => [e.type, e.reason, age((now - Date.parse(e.time)) / 1000), e.from, e.message]);
}

function currentEvents(o: Obj, proxies: ProxyRow[], waypoints: WaypointRow[]): string[][] {
  const events: string[][] = [];
  for (const p of proxies) {
    if (p.refused) events.push(['Warning', 'ProxyRefused', p.proxy, p.refused.reason]);
    for (const [url, t] of Object.entries(p.types as unknown as Record<string, TypeDetail>)) {
      const type = url.slice(url.lastIndexOf('/') + 1);
      for (const r of t.rejected ?? [])
        if (names(o, r.name)) events.push(['Warning', 'NACKed', p.proxy, `${type} ${r.name}: ${r.reason}`]);
      for (const n of t.pending?.names ?? [])
        if (names(o, n)) events.push(['Normal', 'Pending', p.proxy, `${type} ${n}: sent, not yet ACKed`]);
    }
  }
  if (o.kind === 'Gateway') {
    const w = waypoints.find((w) => w.waypoint === `${o.metadata.namespace}/${o.metadata.name}`);
    if (w)
      events.push(
        w.ready
          ? ['Normal', 'WaypointReady', w.ackedBy.join(',') || '-', `${w.users} workloads/services use it`]
          : [
              'Warning',
              'WaypointNotReady',
              '-',
              `${w.users} workloads/services use it; no connected waypoint has ACKed its config (fail closed)`,
            ],
      );
  }
  if (events.length === 0) {
    const connected = proxies.filter((p) => p.connected);
    const synced = connected.filter((p) => Object.values(p.types).every((t) => t.state === 'SYNCED'));
    events.push([
      'Normal',
      'Served',
      '-',
      `${synced.length} of ${connected.length} connected proxies are in sync with the current config`,
    ]);
  }
  return events;
}

/** `zmesh describe KIND NAME [-n NS]`: the stored object, then its events. */
export async function runDescribe(
  kindText: string,
  name: string,
  opts: AdminOptions & { namespace?: string },
): Promise<number> {
  const kind = resolveKind(kindText);
  if (kind === undefined || kind === 'all')
    throw new UsageError(
      `unknown kind ${JSON.stringify(kindText)}: want Namespace, Pod, Service, ServiceAccount, AuthorizationPolicy, Gateway, HTTPRoute, GRPCRoute, DestinationRule, RequestAuthentication or PeerAuthentication`,
    );
  const t = await target(opts);
  const namespace = opts.namespace ?? 'default';
  const res = await adminRequest(t, `/objects?${new URLSearchParams({ full: '1', kind, namespace, name })}`);
  const out = res.json<{ objects: Obj[] } & Refusal>();
  if (!res.ok) return printRefusal('describe', 'refused', res.status, out);
  const o = out.objects[0];
  const key = `${kind}/${kind === 'Namespace' ? '' : namespace}/${name}`;
  const recorded = await adminRequest(t, `/events?${new URLSearchParams({ object: key })}`).then((r) =>
    r.ok ? r.json<RecordedEvent[]>() : [],
  );
  if (o === undefined) {
    console.error(
      `zmesh describe: no ${kind} ${name}${kind === 'Namespace' ? '' : ` in namespace ${namespace}`}`,
    );
    // A refused object was never stored: why it was refused is all there is to show.
    if (recorded.length > 0) printEvents(recordedRows(recorded, Date.now()));
    return 1;
  }
  const route = kind === 'HTTPRoute' || kind === 'GRPCRoute';
  const [proxies, waypoints, routes] = await Promise.all([
    adminRequest(t, '/proxy-status').then((r) => r.json<ProxyRow[]>()),
    adminRequest(t, '/waypoint-status').then((r) => r.json<WaypointRow[]>()),
    route ? adminRequest(t, '/route-status').then((r) => r.json<RouteRow[]>()) : [],
  ]);
  console.log(stringify(o).trimEnd());
  printEvents(describeEvents(o, proxies, waypoints, recorded, Date.now(), routes));
  return 0;
}

function printEvents(rows: string[][]): void {
  console.log('\nEvents:');
  console.log(
    table(['TYPE', 'REASON', 'AGE', 'FROM', 'MESSAGE'], rows)
      .split('\n')
      .map((l) => `  ${l}`)
      .join('\n'),
  );
}
