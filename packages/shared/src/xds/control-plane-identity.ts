import { ZmeshError } from '../errors/zmesh-error.js';
import { RootsFileWatcher } from '../identity/roots-file.js';
import { TrustBundle } from '../identity/trust-bundle.js';
import { CaClient, type CaClientOptions } from './ca-client.js';
import { TokenFile } from './token-file.js';

export interface ControlPlaneIdentityOptions {
  /** `--xds`: where the CA answers (the control plane's addresses). */
  address: string;
  tokenFile: string;
  rootsFile: string;
  trustDomain: string;
  backoff?: CaClientOptions['backoff'];
  trustRootsFromCa?: boolean;
}

/** A proxy's footing with the control plane: its node token and roots, both followed, and the CA client that uses them. */
export interface ControlPlaneIdentity {
  token: TokenFile;
  bundle: TrustBundle;
  roots: RootsFileWatcher;
  ca: CaClient;
  /** Stops following the token and roots files and closes the CA client. */
  close(): void;
}

/**
 * Reads `--token-file` and `--roots-file` (ztunnel and waypoint alike), watches both from
 * then on, and makes the CA client. A file that cannot be read, or roots that do not parse,
 * throw ZM_ERR_CONFIG_INVALID naming the flag: a runtime failure (exit 1), not a usage error.
 */
export async function openControlPlaneIdentity(
  opts: ControlPlaneIdentityOptions,
): Promise<ControlPlaneIdentity> {
  let token: TokenFile;
  try {
    token = await TokenFile.read(opts.tokenFile);
  } catch (e) {
    throw new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: '--token-file', reason: (e as Error).message });
  }
  const bundle = new TrustBundle(opts.trustDomain);
  const roots = new RootsFileWatcher(opts.rootsFile, bundle);
  const loaded = await roots.start();
  if (!loaded.ok) {
    roots.stop();
    throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
      source: '--roots-file',
      reason: loaded.error.join('; '),
    });
  }
  token.watch();
  const ca = new CaClient({
    address: opts.address,
    token: () => token.token,
    refreshToken: () => token.reread(),
    bundle,
    ...(opts.trustRootsFromCa ? { trustRootsFromCa: true } : {}),
    ...(opts.backoff ? { backoff: opts.backoff } : {}),
  });
  return {
    token,
    bundle,
    roots,
    ca,
    close: () => {
      roots.stop();
      token.stop();
      ca.close();
    },
  };
}
