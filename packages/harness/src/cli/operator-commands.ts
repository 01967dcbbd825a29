import { readFile } from 'node:fs/promises';
import { type AdminTarget, adminRequest, isZmeshError, readAdminToken } from '@zmesh/shared';

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

async function target(opts: AdminOptions): Promise<AdminTarget> {
  return opts.adminTokenFile
    ? { admin: opts.admin, token: await readAdminToken(opts.adminTokenFile) }
    : { admin: opts.admin };
}

/** Runs a command; a known failure (ZmeshError, a file that cannot be read) is one line. */
async function oneLine(command: string, run: () => Promise<number>): Promise<number> {
  try {
    return await run();
  } catch (e) {
    if (isZmeshError(e)) console.error(`zmesh ${command}: ${e.code}: ${e.message}`);
    else if (e instanceof Error && 'code' in e && typeof e.code === 'string')
      console.error(`zmesh ${command}: ${e.message}`);
    else throw e;
    return 1;
  }
}

interface Refusal {
  code?: string;
  reasons?: string[];
  error?: string;
}

/** A refused change: a header, then each reason on its own line (`file#doc (Kind ns/name): path: reason`). */
function printRefusal(command: string, what: string, status: number, out: Refusal): number {
  const reasons = out.reasons ?? (out.error ? [out.error] : [`HTTP ${status}`]);
  const code = out.code ?? (status === 401 ? 'ZM_ERR_ADMIN_UNAUTHORIZED' : 'ZM_ERR_CONFIG_INVALID');
  console.error(`zmesh ${command}: ${code}: ${what}, nothing changed (${reasons.length} reasons):`);
  for (const r of reasons) console.error(r);
  return 1;
}

export function runApply(file: string, opts: AdminOptions): Promise<number> {
  return oneLine('apply', async () => {
    const body = await readFile(file, 'utf8');
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
    if ((opts.file === undefined) === (kind === undefined || name === undefined)) {
      console.error('zmesh delete: give either -f FILE or KIND NAME (with -n NS), not both');
      return 2;
    }
    const t = await target(opts);
    const res = opts.file
      ? await adminRequest(t, `/delete?source=${encodeURIComponent(opts.file)}`, {
          method: 'POST',
          body: await readFile(opts.file, 'utf8'),
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

/** Prints every proxy's status (JSON); each waypoint that is not ready gets a warning line. */
export function runProxyStatus(opts: AdminOptions): Promise<number> {
  return oneLine('proxy-status', async () => {
    const t = await target(opts);
    const res = await adminRequest(t, '/proxy-status');
    if (!res.ok) return printRefusal('proxy-status', 'refused', res.status, res.json<Refusal>());
    console.log(res.text.trimEnd());
    const waypoints = (await adminRequest(t, '/waypoint-status')).json<
      Array<{ waypoint: string; users: number; ready: boolean }>
    >();
    for (const w of waypoints.filter((w) => !w.ready && w.users > 0)) {
      console.error(
        `waypoint ${w.waypoint}: NOT READY: ${w.users} workloads/services use it, no connected waypoint has ACKed its config; their traffic is refused (fail closed)`,
      );
    }
    return 0;
  });
}

/** `zmesh ns l7 on|off <namespace>`: exit 0 when every connected proxy ACKed, 1 naming those that did not. */
export function runNamespaceL7(
  state: string,
  namespace: string,
  opts: AdminOptions & { waypoint?: string; timeout: string },
): Promise<number> {
  return oneLine('ns l7', async () => {
    if (state !== 'on' && state !== 'off') {
      console.error(`zmesh ns l7: state must be on or off, got ${state}`);
      return 2;
    }
    const query = new URLSearchParams({ namespace, state, timeoutMs: String(Number(opts.timeout) * 1000) });
    if (opts.waypoint) query.set('waypoint', opts.waypoint);
    const res = await adminRequest(await target(opts), `/namespace-l7?${query}`, { method: 'POST' });
    const out = res.json<
      Refusal & {
        version?: number;
        acked?: string[];
        notAcked?: Array<{ proxy: string; state: string; reason?: string }>;
      }
    >();
    if (res.status === 400 || res.status === 401)
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
