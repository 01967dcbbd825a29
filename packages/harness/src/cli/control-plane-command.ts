import { chmod, readFile, rm } from 'node:fs/promises';
import { ControlPlane, loadOrCreateCa, startAdminServer, writeRootsFile } from '@zmesh/control-plane';
import { startFailure } from '@zmesh/shared';

export interface ControlPlaneCommandOptions {
  config?: string;
  port: string;
  adminPort: string;
  trustDomain: string;
  caDir?: string;
  rootsFile?: string;
  maxCertTtl?: string;
  host: string;
  /** xDS and CA on this Unix socket (mode 0600) instead of host:port. */
  socket?: string;
}

/**
 * `zmesh control-plane`: config store (watched directory) → xDS and the CA on loopback, plus
 * the admin endpoint that `zmesh apply`, `zmesh proxy-status` and `zmesh ns` talk to. The
 * CA root comes from --ca-dir (created there if absent; in memory without it); the roots
 * proxies must trust are written to --roots-file, which they watch. Resolves with 0 once
 * serving (SIGINT/SIGTERM then stop it), or with 1 and one line naming the reason when it
 * cannot start (a port in use, a refused address or config).
 */
export async function runControlPlane(options: ControlPlaneCommandOptions): Promise<number> {
  const ca = await loadOrCreateCa(options.trustDomain, options.caDir);
  if (options.rootsFile) await writeRootsFile(options.rootsFile, [ca.rootPem]);
  const cp = new ControlPlane({
    trustDomain: options.trustDomain,
    signCsr: (csr, opts) => ca.signCsr(csr, opts),
    ...(options.maxCertTtl ? { maxCertTtlSeconds: Number(options.maxCertTtl) } : {}),
    ...(options.config ? { configDir: options.config, watch: true } : {}),
  });
  if (options.socket) await rm(options.socket, { force: true });
  let port: number;
  let admin: Awaited<ReturnType<typeof startAdminServer>>;
  try {
    port = await cp.start(Number(options.port), options.socket ? `unix:${options.socket}` : options.host);
    if (options.socket) await chmod(options.socket, 0o600);
    admin = await startAdminServer(cp, Number(options.adminPort), options.host);
  } catch (e) {
    // The xDS server may be up when the admin port is taken: close it before saying why.
    await cp.stop();
    return startFailure('control-plane', e);
  }
  const where = options.socket ? `unix:${options.socket}` : `${options.host}:${port} (plaintext, loopback)`;
  console.error(
    `control plane: xDS and CA on ${where}, admin on ${options.host}:${admin.port}` +
      (options.rootsFile ? `, roots in ${options.rootsFile}` : ''),
  );
  const stop = async () => {
    await admin.close();
    await cp.stop();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  return 0;
}

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
