import { readFile } from 'node:fs/promises';
import * as http from 'node:http';
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
  /** Prometheus /metrics and /healthz/ready on the waypoint's address (DESIGN §3 Ports); "0" disables. */
  metricsPort?: string;
}

export const DEFAULT_METRICS_PORT = 15020;

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
  const metricsPort = Number(opts.metricsPort ?? DEFAULT_METRICS_PORT);
  const metrics = metricsPort > 0 ? await serveMetrics(waypoint, opts.address, metricsPort) : undefined;
  await new Promise<void>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
  });
  log.info('shutting down');
  metrics?.close();
  await waypoint.stop();
  return 0;
}

function serveMetrics(waypoint: Waypoint, host: string, port: number): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET') return void res.writeHead(405).end();
    if (req.url === '/healthz/ready') return void res.writeHead(200).end('ready\n');
    if (req.url !== '/metrics') return void res.writeHead(404).end();
    waypoint.metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': waypoint.metrics.registry.contentType }).end(text),
      () => res.writeHead(500).end(),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve(server));
  });
}
