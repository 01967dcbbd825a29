import { X509Certificate } from 'node:crypto';
import {
  type CaClient,
  type Credential,
  generateCsr,
  logger,
  MeshMetrics,
  openControlPlaneIdentity,
  type Result,
  type TokenFile,
  type TrustBundle,
} from '@zmesh/shared';
import type { Registry } from 'prom-client';
import { decodeWaypointConfig } from '../config/config-parser.js';
import type { WaypointConfig } from '../config/waypoint-config.js';
import { normalizationOf } from '../http/request-target.js';
import { warmUpBeforeListening, warmUpCount } from '../warm-up.js';
import { WAYPOINT_HBONE_PORT, Waypoint } from '../waypoint.js';
import { WaypointXdsSource } from '../xds/waypoint-xds-source.js';

const log = logger('cli');

/** A failed renewal is retried this often (bounded), until the certificate in force expires. */
const RENEW_RETRY_MS = 5_000;

export interface XdsModeOptions {
  xds: string;
  tokenFile: string;
  rootsFile: string;
  /** `<namespace>/<name>` of this waypoint's Gateway. */
  gateway: string;
  address: string;
  port?: string;
  trustDomain?: string;
  certTtlSeconds?: string;
  warmUpRequests?: string;
  pathNormalization?: string;
  numTrustedProxies?: number;
}

export interface RunningWaypoint {
  waypoint: Waypoint;
  stop(): Promise<void>;
}

/**
 * `zmesh waypoint --xds`: config from the control plane (its `<ns>/<gateway>` resource), the
 * SVID from its CA API with the node token, roots from the watched roots file. Resolves
 * once the first valid config has arrived and the waypoint listens; undefined if `stopped`
 * settles first.
 */
export async function startFromControlPlane(
  opts: XdsModeOptions,
  stopped: Promise<void>,
): Promise<RunningWaypoint | string | undefined> {
  const id = await openControlPlaneIdentity({
    address: opts.xds,
    tokenFile: opts.tokenFile,
    rootsFile: opts.rootsFile,
    trustDomain: opts.trustDomain ?? 'cluster.local',
  });
  // Made before the waypoint so the xDS client's metrics (zmesh_xds_*) are in its registry.
  // Process metrics too (RSS, heap, event-loop delay), as ztunnel's: the soak judges them.
  const metrics = new MeshMetrics({ defaultMetrics: true });
  const feed = new ConfigFeed(opts, id.token, metrics.registry, id.bundle);
  let waypoint: Waypoint | undefined;
  let renewal: NodeJS.Timeout | undefined;
  const stop = async () => {
    clearTimeout(renewal);
    await feed.source.stop();
    id.close();
    await waypoint?.stop();
  };
  log.info(
    { xds: opts.xds, gateway: opts.gateway },
    'waiting for the waypoint config from the control plane',
  );
  const config = await Promise.race([feed.first, stopped.then(() => undefined)]);
  if (config === undefined) {
    await stop();
    return undefined;
  }
  const identity = `spiffe://${config.trustDomain}/ns/${config.namespace}/sa/${config.serviceAccount}`;
  const ttl = Number(opts.certTtlSeconds ?? 24 * 3600);
  let credential: Credential;
  try {
    credential = await issue(id.ca, identity, ttl);
  } catch (e) {
    await stop();
    return `certificate for ${identity}: ${(e as Error).message}`;
  }
  const port = opts.port === undefined ? WAYPOINT_HBONE_PORT : Number(opts.port);
  await warmUpBeforeListening({
    credential,
    bundle: id.bundle,
    config,
    ...warmUpCount(opts.warmUpRequests),
  });
  waypoint = new Waypoint({
    metrics,
    credential,
    bundle: id.bundle,
    config,
    host: opts.address,
    port,
    ...normalizationOf(opts.pathNormalization),
    ...(opts.numTrustedProxies ? { numTrustedProxies: opts.numTrustedProxies } : {}),
  });
  feed.attach(waypoint);
  let at: Awaited<ReturnType<Waypoint['start']>>;
  try {
    at = await waypoint.start();
  } catch (e) {
    // Its port is taken: stop the subscription, the roots watcher and the CA client too.
    await stop();
    throw e;
  }
  log.info({ identity, ...at }, 'waypoint listening (config from the control plane)');
  const renew = (delayMs: number) => {
    renewal = setTimeout(() => {
      issue(id.ca, identity, ttl).then(
        (next) => {
          waypoint?.updateCredential(next);
          renew(halfLife(next));
        },
        (e: Error) => {
          log.warn({ identity, err: e.message }, 'certificate renewal failed; retrying');
          renew(RENEW_RETRY_MS);
        },
      );
    }, delayMs);
    renewal.unref();
  };
  renew(halfLife(credential));
  return { waypoint, stop };
}

/**
 * The ADS subscription, before and after the waypoint exists: until then a valid config is
 * held (the newest wins) and `first` resolves with the first; after `attach`, every version
 * goes to `Waypoint.applyConfig`.
 */
class ConfigFeed {
  readonly source: WaypointXdsSource;
  readonly first: Promise<WaypointConfig>;
  #waypoint: Waypoint | undefined;
  #latest: WaypointConfig | undefined;

  constructor(opts: XdsModeOptions, token: TokenFile, registry: Registry, roots: TrustBundle) {
    let resolve: (c: WaypointConfig) => void = () => {};
    this.first = new Promise((r) => {
      resolve = r;
    });
    this.source = new WaypointXdsSource({
      address: opts.xds,
      resourceName: opts.gateway,
      token: () => token.token,
      refreshToken: () => token.reread(),
      roots,
      registry,
      node: { id: `waypoint~${opts.address}~${opts.gateway.replace('/', '.')}~svc.cluster.local` },
      apply: (doc, from): Result<WaypointConfig> => {
        if (this.#waypoint) return this.#waypoint.applyConfig(doc, from);
        const decoded = decodeWaypointConfig(doc, from);
        if (!decoded.ok) log.warn({ reasons: decoded.error }, 'config from the control plane rejected');
        else {
          this.#latest = decoded.value;
          resolve(decoded.value);
        }
        return decoded;
      },
    });
    this.source.start();
  }

  /** From now on configs go to the waypoint; one that arrived since `first` is applied now. */
  attach(waypoint: Waypoint): void {
    this.#waypoint = waypoint;
    if (this.#latest !== undefined && this.#latest !== waypoint.config) waypoint.setConfig(this.#latest);
  }
}

async function issue(ca: CaClient, identity: string, ttlSeconds: number): Promise<Credential> {
  const { keyPem, csrPem } = await generateCsr(identity);
  const chain = await ca.sign(csrPem, identity, ttlSeconds);
  const leaf = new X509Certificate(chain[0]!);
  return {
    identity,
    keyPem,
    certChainPem: chain,
    notBefore: new Date(leaf.validFrom),
    notAfter: new Date(leaf.validTo),
  };
}

/** Renew at half the remaining lifetime, as Istio's proxies do. */
function halfLife(cred: Credential): number {
  return Math.max(1_000, (cred.notAfter.getTime() - Date.now()) / 2);
}
