import { readFile } from 'node:fs/promises';
import { ControlPlane, startAdminServer } from '@zmesh/control-plane';

export interface ControlPlaneCommandOptions {
  config?: string;
  port: string;
  adminPort: string;
  trustDomain: string;
}

/**
 * `zmesh control-plane`: config store (watched directory) → xDS on loopback, plus the
 * admin endpoint that `zmesh apply` and `zmesh proxy-status` talk to. The CA service is
 * served once a signer is wired in (the identity library's CertificateAuthority).
 */
export async function runControlPlane(options: ControlPlaneCommandOptions): Promise<void> {
  const cp = new ControlPlane({
    trustDomain: options.trustDomain,
    ...(options.config ? { configDir: options.config, watch: true } : {}),
  });
  const port = await cp.start(Number(options.port));
  const admin = await startAdminServer(cp, Number(options.adminPort));
  console.error(
    `control plane: xDS on 127.0.0.1:${port} (plaintext, loopback), admin on 127.0.0.1:${admin.port}`,
  );
  const stop = async () => {
    await admin.close();
    await cp.stop();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
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
