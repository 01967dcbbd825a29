import { chmod, rm } from 'node:fs/promises';
import { defaultAdminSocket, readAdminToken, startFailure } from '@zmesh/shared';
import { type AdminListen, type AdminServer, startAdminServer } from '../admin-server.js';
import { loadOrCreateCa, writeRootsFile } from '../ca-files.js';
import { ControlPlane } from '../control-plane.js';

export interface ControlPlaneCommandOptions {
  config?: string;
  port: string;
  /** Admin API on loopback TCP (needs adminTokenFile) instead of the Unix socket. */
  adminPort?: string;
  adminTokenFile?: string;
  adminSocket?: string;
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
  // The waypoint's own decoder: admission refuses what a waypoint would NACK.
  const { decodeWaypointConfig } = await import('@zmesh/waypoint');
  const cp = new ControlPlane({
    trustDomain: options.trustDomain,
    signCsr: (csr, opts) => ca.signCsr(csr, opts),
    ...(options.maxCertTtl ? { maxCertTtlSeconds: Number(options.maxCertTtl) } : {}),
    ...(options.config ? { configDir: options.config, watch: true } : {}),
    defaultMetrics: true,
    validateWaypointConfig: (config) => {
      const decoded = decodeWaypointConfig(config, 'waypoint');
      return decoded.ok ? [] : decoded.error.map((r) => r.replace(/^waypoint: /, ''));
    },
  });
  if (options.socket) await rm(options.socket, { force: true });
  let port: number;
  let admin: AdminServer;
  try {
    const listen: AdminListen =
      options.adminPort === undefined
        ? { socket: options.adminSocket ?? defaultAdminSocket() }
        : {
            host: options.host,
            port: Number(options.adminPort),
            token: options.adminTokenFile ? await readAdminToken(options.adminTokenFile) : '',
          };
    port = await cp.start(Number(options.port), options.socket ? `unix:${options.socket}` : options.host);
    if (options.socket) await chmod(options.socket, 0o600);
    admin = await startAdminServer(cp, listen);
  } catch (e) {
    // The xDS server may be up when the admin port is taken: close it before saying why.
    await cp.stop();
    return startFailure('control-plane', e);
  }
  const where = options.socket ? `unix:${options.socket}` : `${options.host}:${port} (plaintext, loopback)`;
  console.error(
    `control plane: xDS and CA on ${where}, admin on ${admin.port === 0 ? `unix:${admin.address}` : `${options.host}:${admin.port}`}` +
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
