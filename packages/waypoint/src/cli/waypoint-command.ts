import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CertificateAuthority, logger, TrustBundle } from '@zmesh/shared';
import { loadWaypointConfig } from '../config/config-parser.js';
import { WAYPOINT_HBONE_PORT, Waypoint } from '../waypoint.js';

const log = logger('cli');

export interface RunWaypointOptions {
  config?: string;
  /** Address to listen on (the waypoint's own IP; 127.0.0.N in explicit-proxy mode). */
  address?: string;
  port?: string;
  /** Directory with root-cert.pem and root-key.pem: the local CA signs the waypoint's SVID. */
  caDir?: string;
  trustDomain?: string;
  certTtlSeconds?: string;
}

/**
 * `zmesh waypoint --config f.yaml`: runs one waypoint from a local file (no control plane).
 * Exit code 2 with every reason when the config or flags are invalid; 0 after SIGINT/SIGTERM.
 * The file is read once; an xDS source will call Waypoint.setConfig with the same object.
 */
export async function runWaypoint(opts: RunWaypointOptions): Promise<number> {
  if (!opts.config || !opts.caDir || !opts.address) {
    process.stderr.write(
      'zmesh waypoint: --config, --address and --ca-dir are required without a control plane\n',
    );
    return 2;
  }
  const config = await loadWaypointConfig(opts.config);
  if (!config.ok) {
    for (const reason of config.error) process.stderr.write(`zmesh waypoint: ${reason}\n`);
    return 2;
  }
  const trustDomain = opts.trustDomain ?? config.value.trustDomain;
  const ca = await CertificateAuthority.fromPem({
    trustDomain,
    certPem: await readFile(join(opts.caDir, 'root-cert.pem'), 'utf8'),
    keyPem: await readFile(join(opts.caDir, 'root-key.pem'), 'utf8'),
  });
  const identity = `spiffe://${trustDomain}/ns/${config.value.namespace}/sa/${config.value.serviceAccount}`;
  const credential = await ca.issue(identity, Number(opts.certTtlSeconds ?? 24 * 3600));
  const waypoint = new Waypoint({
    credential,
    bundle: new TrustBundle(trustDomain, [ca.rootPem]),
    config: config.value,
    host: opts.address,
    port: opts.port === undefined ? WAYPOINT_HBONE_PORT : Number(opts.port),
  });
  const at = await waypoint.start();
  log.info({ identity, ...at }, 'waypoint listening');
  await new Promise<void>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
  });
  log.info('shutting down');
  await waypoint.stop();
  return 0;
}
