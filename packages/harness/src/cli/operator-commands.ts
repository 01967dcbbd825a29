import {
  type AdminTarget,
  adminRequest,
  isZmeshError,
  readAdminToken,
  readManifests,
  UsageError,
} from '@zmesh/shared/cli';
import { age, structured, table } from './table.js';

/**
 * The operator's commands against a running control plane's admin API (`zmesh apply`,
 * `zmesh delete`, `zmesh proxy-status`, `zmesh ns l7`): HTTP over its Unix socket (or TCP
 * with a bearer token), nothing of the control plane loaded. A bad input or an unreachable
 * control plane is one line with its stable code and exit 1, never a stack trace.
 */

export interface AdminOptions {
  admin: string;
  adminTokenFile?: string;
}

export async function target(opts: AdminOptions): Promise<AdminTarget> {
  return opts.adminTokenFile
    ? { admin: opts.admin, token: await readAdminToken(opts.adminTokenFile) }
    : { admin: opts.admin };
}

/** Runs a command; a known failure (ZmeshError, a file that cannot be read) is one line. */
async function oneLine(command: string, run: () => Promise<number>): Promise<number> {
  try {
    return await run();
  } catch (e) {
    if (!isZmeshError(e)) throw e; // runCli: a usage error (exit 2) or a bug
    console.error(`zmesh ${command}: ${e.code}: ${e.message}`);
    return 1;
  }
}

export interface Refusal {
  code?: string;
  reasons?: string[];
  error?: string;
}

/**
 * A refused change: a header, then each reason on its own line (`file#doc (Kind ns/name): path: reason`).
 * A store that cannot be written (503, ZM_ERR_STATE_STORE) is not the change's fault: one line.
 */
export function printRefusal(command: string, what: string, status: number, out: Refusal): number {
  const reasons = out.reasons ?? (out.error ? [out.error] : [`HTTP ${status}`]);
  if (status === 503) {
    const code = out.code ?? 'ZM_ERR_STATE_STORE';
    console.error(
      `zmesh ${command}: ${code}: ${what}, nothing changed; retry once the store answers: ${reasons.join('; ')}`,
    );
    return 1;
  }
  const code = out.code ?? (status === 401 ? 'ZM_ERR_ADMIN_UNAUTHORIZED' : 'ZM_ERR_CONFIG_INVALID');
  console.error(`zmesh ${command}: ${code}: ${what}, nothing changed (${reasons.length} reasons):`);
  for (const r of reasons) console.error(r);
  return 1;
}

export function runApply(file: string, opts: AdminOptions): Promise<number> {
  return oneLine('apply', async () => {
    const body = await readManifests(file);
    const res = await adminRequest(await target(opts), `/apply?source=${encodeURIComponent(file)}`, {
      method: 'POST',
      body,
    });
    const out = res.json<{ generation?: number } & Refusal>();
    if (!res.ok) return printRefusal('apply', `refused ${file}`, res.status, out);
    console.log(`applied ${file} (generation ${out.generation})`);
    return 0;
  });
}

/** `zmesh delete -f FILE` or `zmesh delete KIND NAME [-n NS]`: all named objects go, or none. */
export function runDelete(
  kind: string | undefined,
  name: string | undefined,
  opts: AdminOptions & { file?: string; namespace: string },
): Promise<number> {
  return oneLine('delete', async () => {
    if ((opts.file === undefined) === (kind === undefined || name === undefined))
      throw new UsageError('give either -f FILE or KIND NAME (with -n NS), not both');
    const t = await target(opts);
    const res = opts.file
      ? await adminRequest(t, `/delete?source=${encodeURIComponent(opts.file)}`, {
          method: 'POST',
          body: await readManifests(opts.file),
        })
      : await adminRequest(
          t,
          `/delete?${new URLSearchParams({ kind: kind ?? '', name: name ?? '', namespace: opts.namespace })}`,
          { method: 'POST' },
        );
    const what = opts.file ?? `${kind} ${opts.namespace}/${name}`;
    const out = res.json<{ generation?: number } & Refusal>();
    if (!res.ok) return printRefusal('delete', `refused to delete ${what}`, res.status, out);
    console.log(`deleted ${what} (generation ${out.generation})`);
    return 0;
  });
}

interface TypeRow {
  sent: number | null;
  acked: number | null;
  nacked: { version: number; reason: string } | null;
  pending: { count: number };
  state: string;
}
export interface ProxyRow {
  proxy: string;
  node: string;
  connected: boolean;
  lastContactSecondsAgo: number;
  /** `host:port` of its admin endpoint, as it announced it (ztunnels), or null. */
  admin?: string | null;
  refused: { reason: string; secondsAgo: number } | null;
  types: Record<string, TypeRow>;
}

/** The proxy-status table: one row per proxy and type (exported for golden tests). */
export function proxyStatusTable(proxies: ProxyRow[]): string {
  const rows: string[][] = [];
  const v = (n: number | null | undefined) => (n === null || n === undefined ? '-' : String(n));
  for (const p of proxies) {
    const when = age(p.lastContactSecondsAgo);
    const name = p.connected ? p.proxy : `${p.proxy} (disconnected)`;
    if (p.refused) rows.push([name, '-', '-', '-', `REFUSED: ${p.refused.reason}`, '-', when]);
    for (const [url, t] of Object.entries(p.types).sort(([a], [b]) => a.localeCompare(b))) {
      const nacked = t.nacked ? `${t.nacked.version}: ${t.nacked.reason}` : '-';
      rows.push([
        name,
        url.slice(url.lastIndexOf('/') + 1),
        v(t.sent),
        v(t.acked),
        nacked,
        v(t.pending.count),
        when,
      ]);
    }
  }
  return table(['PROXY', 'TYPE', 'SENT', 'ACKED', 'NACKED', 'PENDING', 'AGE'], rows);
}

/** A route's status per parent, as `GET /route-status` gives it (control-plane/src/route-status.ts). */
export interface RouteRow {
  kind: string;
  namespace: string;
  name: string;
  parents: Array<{
    parentRef: { kind: string; namespace: string; name: string; port?: number };
    waypoint: string | null;
    conditions: Array<{ type: string; status: string; reason: string; message: string }>;
  }>;
}

/**
 * The routes table under proxy-status: per route and parent, Accepted and ResolvedRefs as
 * `True` or `False (Reason)`, and the messages of the false ones (exported for golden tests).
 */
export function routeStatusTable(routes: RouteRow[]): string {
  const rows = routes.flatMap((r) =>
    (r.parents.length === 0 ? [undefined] : r.parents).map((p) => {
      const c = (type: string) => {
        const x = p?.conditions.find((k) => k.type === type);
        return x === undefined ? '-' : x.status === 'True' ? 'True' : `${x.status} (${x.reason})`;
      };
      const why = (p?.conditions ?? []).filter((k) => k.status !== 'True').map((k) => k.message);
      return [
        `${r.kind} ${r.namespace}/${r.name}`,
        p ? `${p.parentRef.kind} ${p.parentRef.namespace}/${p.parentRef.name}` : '(no parentRefs)',
        c('Accepted'),
        c('ResolvedRefs'),
        why.join('; ') || '-',
      ];
    }),
  );
  return table(['ROUTE', 'PARENT', 'ACCEPTED', 'RESOLVED-REFS', 'MESSAGE'], rows);
}

/**
 * Every proxy's status and every route's (a table each, or JSON/YAML `{proxies, routes}`);
 * each waypoint that is not ready gets a warning line.
 */
export function runProxyStatus(opts: AdminOptions & { output?: 'table' | 'json' | 'yaml' }): Promise<number> {
  return oneLine('proxy-status', async () => {
    const t = await target(opts);
    const res = await adminRequest(t, '/proxy-status');
    if (!res.ok) return printRefusal('proxy-status', 'refused', res.status, res.json<Refusal>());
    const proxies = res.json<ProxyRow[]>();
    const routes = (await adminRequest(t, '/route-status')).json<RouteRow[]>();
    const output = opts.output ?? 'table';
    if (output === 'table') {
      console.log(proxies.length === 0 ? 'no proxies' : proxyStatusTable(proxies));
      if (routes.length > 0) console.log(`\n${routeStatusTable(routes)}`);
    } else console.log(structured({ proxies, routes }, output));
    const waypoints = (await adminRequest(t, '/waypoint-status')).json<
      Array<{ waypoint: string; users: number; held?: number; ready: boolean }>
    >();
    for (const w of waypoints.filter((w) => !w.ready)) {
      if (w.users > 0)
        console.error(
          `waypoint ${w.waypoint}: NOT READY: ${w.users} workloads/services use it, no connected waypoint has ACKed its config; their traffic is refused (fail closed)`,
        );
      if ((w.held ?? 0) > 0)
        console.error(
          `waypoint ${w.waypoint}: NOT READY: ${w.held} users kept on their previous path until it ACKs (newly bound; no connected waypoint has ACKed its config)`,
        );
    }
    // Held by the control plane but not served as written (an older control plane has no such route).
    const notServed = await adminRequest(t, '/not-served');
    if (notServed.ok)
      for (const n of notServed.json<Array<{ object: string; reason: string }>>())
        console.error(`${n.object}: NOT SERVED by the control plane: ${n.reason}`);
    return 0;
  });
}

/** `zmesh ns l7 on|off <namespace>`: exit 0 when every connected proxy ACKed, 1 naming those that did not. */
export function runNamespaceL7(
  state: string,
  namespace: string,
  opts: AdminOptions & { waypoint?: string; timeout: number },
): Promise<number> {
  return oneLine('ns l7', async () => {
    if (state !== 'on' && state !== 'off') throw new UsageError(`state must be on or off, got ${state}`);
    const query = new URLSearchParams({
      namespace,
      state,
      timeoutMs: String(Math.round(opts.timeout * 1000)),
    });
    if (opts.waypoint) query.set('waypoint', opts.waypoint);
    const res = await adminRequest(await target(opts), `/namespace-l7?${query}`, { method: 'POST' });
    const out = res.json<
      Refusal & {
        version?: number;
        acked?: string[];
        notAcked?: Array<{ proxy: string; state: string; reason?: string }>;
      }
    >();
    if (res.status === 400 || res.status === 401 || res.status === 503)
      return printRefusal('ns l7', `refused L7 ${state} for ${namespace}`, res.status, out);
    const notAcked = out.notAcked ?? [];
    console.log(
      `namespace ${namespace}: L7 ${state} (version ${out.version}), acked by ${out.acked?.length ?? 0} proxies` +
        (notAcked.length > 0 ? `; TIMED OUT after ${opts.timeout}s waiting for ${notAcked.length}:` : ''),
    );
    for (const p of notAcked) {
      console.error(`  not acked: ${p.proxy} (${p.state}${p.reason ? `: ${p.reason}` : ''})`);
    }
    return res.ok ? 0 : 1;
  });
}
