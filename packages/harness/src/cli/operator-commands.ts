import { readFile } from 'node:fs/promises';

/**
 * The operator's commands against a running control plane's admin endpoint (`zmesh apply`,
 * `zmesh proxy-status`, `zmesh ns l7`): HTTP on loopback, nothing of the control plane loaded.
 */

export async function runApply(file: string, admin: string): Promise<number> {
  const body = await readFile(file, 'utf8');
  const res = await fetch(`${admin}/apply?source=${encodeURIComponent(file)}`, { method: 'POST', body });
  const out = (await res.json()) as { generation?: number; reasons?: string[] };
  if (res.ok) {
    console.log(`applied ${file} (generation ${out.generation})`);
    return 0;
  }
  console.error(`refused ${file}:\n  ${(out.reasons ?? []).join('\n  ')}`);
  return 1;
}

export async function runProxyStatus(admin: string): Promise<number> {
  const res = await fetch(`${admin}/proxy-status`);
  console.log(await res.text());
  return res.ok ? 0 : 1;
}

/** `zmesh ns l7 on|off <namespace>`: exit 0 when every connected ztunnel ACKed, 1 naming those that did not. */
export async function runNamespaceL7(
  state: string,
  namespace: string,
  opts: { admin: string; waypoint?: string; timeout: string },
): Promise<number> {
  if (state !== 'on' && state !== 'off') {
    console.error(`zmesh ns l7: state must be on or off, got ${state}`);
    return 2;
  }
  const query = new URLSearchParams({ namespace, state, timeoutMs: String(Number(opts.timeout) * 1000) });
  if (opts.waypoint) query.set('waypoint', opts.waypoint);
  const res = await fetch(`${opts.admin}/namespace-l7?${query}`, { method: 'POST' });
  const out = (await res.json()) as {
    reasons?: string[];
    version?: number;
    acked?: string[];
    notAcked?: Array<{ proxy: string; state: string; reason?: string }>;
  };
  if (res.status === 400) {
    console.error(`zmesh ns l7: refused:\n  ${(out.reasons ?? []).join('\n  ')}`);
    return 1;
  }
  console.log(
    `namespace ${namespace}: L7 ${state} (version ${out.version}), acked by ${out.acked?.length ?? 0} proxies`,
  );
  for (const p of out.notAcked ?? []) {
    console.error(`  not acked: ${p.proxy} (${p.state}${p.reason ? `: ${p.reason}` : ''})`);
  }
  return res.ok ? 0 : 1;
}
