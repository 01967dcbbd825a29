import * as http from 'node:http';
import {
  CertificateAuthority,
  configFileRefused,
  IdleReclaim,
  InspectorProfiles,
  listenServer,
  logger,
  MeshMetrics,
  readCaDir,
  startFailure,
  TrustBundle,
} from '@zmesh/shared';
import { loadWaypointConfig } from '../config/config-parser.js';
import { trustedProxiesOf } from '../http/remote-address.js';
import { normalizationOf, PATH_NORMALIZATIONS } from '../http/request-target.js';
import { warmUpBeforeListening, warmUpCount } from '../warm-up.js';
import { WAYPOINT_HBONE_PORT, Waypoint } from '../waypoint.js';
import { type RunningWaypoint, startFromControlPlane } from './xds-mode.js';

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
  /** Prometheus /metrics and /healthz/ready on the waypoint's address (docs/design.md §3 Ports); "0" disables. */
  metricsPort?: string;
  /** Control plane ADS/CA address: config and certificate come from there (docs/xds.md). */
  xds?: string;
  tokenFile?: string;
  rootsFile?: string;
  /** `<namespace>/<name>` of this waypoint's Gateway: the config resource subscribed to. */
  gateway?: string;
  /** Requests through the L7 path before listening (warm-up.ts); "0" skips it. */
  warmUpRequests?: string;
  /** Istio's pathNormalization (http/request-target.ts); default BASE. */
  pathNormalization?: string;
  /** Istio's numTrustedProxies: X-Forwarded-For hops remote.ip believes (http/remote-address.ts); default 0. */
  numTrustedProxies?: string;
  /** Seconds a SIGTERM leaves requests in flight to finish (DRAIN_GRACE_SECONDS). */
  drainGrace?: string;
}

/**
 * What SIGTERM gives requests in flight: Istio's waypoint (Envoy) drains for 5 s by default
 * (terminationDrainDuration); a longer request is cut when it runs out.
 */
const DRAIN_GRACE_SECONDS = 10;

const DEFAULT_METRICS_PORT = 15020;

/**
 * `zmesh waypoint`: with `--xds`, config and certificate from the control plane; otherwise
 * from a local `--config` file and `--ca-dir`. Exit code 2 when a flag is invalid, 1 with
 * ZM_ERR_CONFIG_INVALID and every reason when the config file is, 1 naming the listener,
 * address and errno when a port cannot be bound (ZM_ERR_LISTEN_BIND); 0 after SIGINT/SIGTERM.
 */
export async function runWaypoint(opts: RunWaypointOptions): Promise<number> {
  const usage = usageError(opts);
  if (usage) {
    process.stderr.write(`zmesh waypoint: ${usage}\n`);
    return 2;
  }
  const stopped = new Promise<void>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
  });
  let running: Awaited<ReturnType<typeof startFromFile | typeof startFromControlPlane>>;
  try {
    running = opts.xds
      ? await startFromControlPlane(
          {
            xds: opts.xds,
            tokenFile: opts.tokenFile!,
            rootsFile: opts.rootsFile!,
            gateway: opts.gateway!,
            address: opts.address!,
            ...pick(opts, ['port', 'trustDomain', 'certTtlSeconds', 'warmUpRequests', 'pathNormalization']),
            ...trustedProxiesOf(opts.numTrustedProxies),
          },
          stopped,
        )
      : await startFromFile(opts);
  } catch (e) {
    return startFailure('waypoint', e);
  }
  if (running === undefined) return 0;
  if (typeof running === 'string' || Array.isArray(running)) {
    for (const reason of [running].flat()) process.stderr.write(`zmesh waypoint: ${reason}\n`);
    return 2;
  }
  const metricsPort = Number(opts.metricsPort ?? DEFAULT_METRICS_PORT);
  let metrics: http.Server | undefined;
  try {
    if (metricsPort > 0) metrics = await serveMetrics(running.waypoint, opts.address!, metricsPort);
  } catch (e) {
    await running.stop();
    return startFailure('waypoint', e);
  }
  // Node and glibc keep what a burst of traffic allocated: 140-150 MB resident on the
  // bench's waypoint path long after its iperf3 runs ended (docs/performance.md, "Memory").
  const reclaim = new IdleReclaim({ registry: running.waypoint.metrics.registry });
  await stopped;
  const graceMs = 1000 * Number(opts.drainGrace ?? DRAIN_GRACE_SECONDS);
  log.info({ graceMs }, 'draining: GOAWAY sent, finishing requests in flight');
  reclaim.stop();
  await running.waypoint.drain(graceMs);
  metrics?.close();
  await running.stop();
  log.info('stopped');
  return 0;
}

function usageError(opts: RunWaypointOptions): string | undefined {
  if (!opts.address) return '--address is required';
  if (opts.drainGrace !== undefined && !/^\d{1,5}$/.test(opts.drainGrace))
    return `--drain-grace: want whole seconds (0 closes at once), got ${opts.drainGrace}`;
  if (
    opts.pathNormalization !== undefined &&
    !(PATH_NORMALIZATIONS as readonly string[]).includes(opts.pathNormalization)
  )
    return `--path-normalization: want one of ${PATH_NORMALIZATIONS.join(', ')}, got ${opts.pathNormalization}`;
  if (opts.numTrustedProxies !== undefined && !/^\d{1,2}$/.test(String(opts.numTrustedProxies)))
    return `--num-trusted-proxies: want a count of proxy hops (0 to 99), got ${opts.numTrustedProxies}`;
  if (opts.warmUpRequests !== undefined && !/^\d{1,7}$/.test(opts.warmUpRequests))
    return `--warm-up-requests: want a count of requests (0 skips the warm-up), got ${opts.warmUpRequests}`;
  if (opts.xds) {
    if (!opts.tokenFile || !opts.rootsFile || !opts.gateway)
      return '--xds needs --token-file, --roots-file and --gateway <namespace/name>';
    if (!/^[a-z0-9-]+\/[a-z0-9-]+$/.test(opts.gateway))
      return `--gateway: want namespace/name, got ${opts.gateway}`;
    return undefined;
  }
  if (!opts.config || !opts.caDir)
    return '--config and --ca-dir are required without --xds (no control plane)';
  return undefined;
}

/** `--config f.yaml --ca-dir D`: the file is read once; the local CA signs the SVID. */
async function startFromFile(opts: RunWaypointOptions): Promise<RunningWaypoint> {
  const config = await loadWaypointConfig(opts.config!);
  if (!config.ok) throw configFileRefused(opts.config!, config.error);
  const trustDomain = opts.trustDomain ?? config.value.trustDomain;
  const ca = await CertificateAuthority.fromPem({
    trustDomain,
    ...(await readCaDir(opts.caDir!)),
  });
  const identity = `spiffe://${trustDomain}/ns/${config.value.namespace}/sa/${config.value.serviceAccount}`;
  const credential = await ca.issue(identity, Number(opts.certTtlSeconds ?? 24 * 3600));
  const bundle = new TrustBundle(trustDomain, [ca.rootPem]);
  const waypoint = new Waypoint({
    metrics: new MeshMetrics({ defaultMetrics: true }),
    credential,
    bundle,
    config: config.value,
    host: opts.address!,
    port: opts.port === undefined ? WAYPOINT_HBONE_PORT : Number(opts.port),
    ...normalizationOf(opts.pathNormalization),
    ...trustedProxiesOf(opts.numTrustedProxies),
  });
  await warmUpBeforeListening({
    credential,
    bundle,
    config: config.value,
    ...warmUpCount(opts.warmUpRequests),
  });
  let at: Awaited<ReturnType<Waypoint['start']>>;
  try {
    at = await waypoint.start();
  } catch (e) {
    await waypoint.stop();
    throw e;
  }
  log.info({ identity, ...at }, 'waypoint listening');
  return { waypoint, stop: () => waypoint.stop() };
}

function pick<K extends keyof RunWaypointOptions>(
  opts: RunWaypointOptions,
  keys: K[],
): Partial<Record<K, string>> {
  const out: Partial<Record<K, string>> = {};
  for (const k of keys) if (typeof opts[k] === 'string') out[k] = opts[k] as string;
  return out;
}

function serveMetrics(waypoint: Waypoint, host: string, port: number): Promise<http.Server> {
  const profiles = new InspectorProfiles();
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET') return void res.writeHead(405).end();
    // Heap snapshots and CPU profiles, to loopback only (this listener is on the pod's address).
    const url = new URL(req.url ?? '/', 'http://waypoint');
    if (url.pathname.startsWith('/debug/')) return void profiles.handle(req, res, url);
    if (req.url === '/healthz/ready')
      return void (waypoint.draining
        ? res.writeHead(503).end('draining\n')
        : res.writeHead(200).end('ready\n'));
    if (req.url !== '/metrics') return void res.writeHead(404).end();
    waypoint.metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': waypoint.metrics.registry.contentType }).end(text),
      () => res.writeHead(500).end(),
    );
  });
  return listenServer(
    server,
    { host, port },
    {
      name: 'metrics',
      onError: (e) => log.warn({ port, err: e.message }, 'metrics accept failed'),
    },
  ).then(() => server);
}
