import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import {
  CaClient,
  type Credential,
  generateCsr,
  logger,
  type Result,
  RootsFileWatcher,
  TrustBundle,
} from '@zmesh/shared';
import { decodeWaypointConfig } from '../config/config-parser.js';
import type { WaypointConfig } from '../config/waypoint-config.js';
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
  let token: string;
  try {
    token = (await readFile(opts.tokenFile, 'utf8')).trim();
  } catch (e) {
    return `--token-file: ${(e as Error).message}`;
  }
  const bundle = new TrustBundle(opts.trustDomain ?? 'cluster.local');
  const roots = new RootsFileWatcher(opts.rootsFile, bundle);
  const loaded = await roots.start();
  if (!loaded.ok) {
    roots.stop();
    return `--roots-file: ${loaded.error.join('; ')}`;
  }
  const ca = new CaClient({ address: opts.xds, token: () => token, bundle });
  let waypoint: Waypoint | undefined;
  let latest: WaypointConfig | undefined;
  let first: () => void = () => {};
  const firstConfig = new Promise<void>((resolve) => {
    first = resolve;
  });
  const source = new WaypointXdsSource({
    address: opts.xds,
    resourceName: opts.gateway,
    token,
    node: { id: `waypoint~${opts.address}~${opts.gateway.replace('/', '.')}~svc.cluster.local` },
    apply: (doc, from): Result<WaypointConfig> => {
      if (waypoint) return waypoint.applyConfig(doc, from);
      const decoded = decodeWaypointConfig(doc, from);
      if (decoded.ok) {
        latest = decoded.value;
        first();
      } else log.warn({ reasons: decoded.error }, 'first config from the control plane rejected');
      return decoded;
    },
  });
  let renewal: NodeJS.Timeout | undefined;
  const stop = async () => {
    clearTimeout(renewal);
    source.stop();
    roots.stop();
    ca.close();
    await waypoint?.stop();
  };
  source.start();
  log.info(
    { xds: opts.xds, gateway: opts.gateway },
    'waiting for the waypoint config from the control plane',
  );
  if ((await Promise.race([firstConfig.then(() => 'config'), stopped.then(() => 'stopped')])) === 'stopped') {
    await stop();
    return undefined;
  }
  const config = latest!;
  const identity = `spiffe://${config.trustDomain}/ns/${config.namespace}/sa/${config.serviceAccount}`;
  const ttl = Number(opts.certTtlSeconds ?? 24 * 3600);
  let credential: Credential;
  try {
    credential = await issue(ca, identity, ttl);
  } catch (e) {
    await stop();
    return `certificate for ${identity}: ${(e as Error).message}`;
  }
  waypoint = new Waypoint({
    credential,
    bundle,
    config,
    host: opts.address,
    port: opts.port === undefined ? WAYPOINT_HBONE_PORT : Number(opts.port),
  });
  if (latest !== config) waypoint.setConfig(latest!);
  const at = await waypoint.start();
  log.info({ identity, ...at }, 'waypoint listening (config from the control plane)');
  const schedule = (cred: Credential, delayMs: number) => {
    renewal = setTimeout(() => {
      issue(ca, identity, ttl).then(
        (next) => {
          waypoint?.updateCredential(next);
          schedule(next, halfLife(next));
        },
        (e: Error) => {
          log.warn({ identity, err: e.message }, 'certificate renewal failed; retrying');
          if (cred.notAfter.getTime() > Date.now()) schedule(cred, RENEW_RETRY_MS);
        },
      );
    }, delayMs);
    renewal.unref();
  };
  schedule(credential, halfLife(credential));
  return { waypoint, stop };
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
