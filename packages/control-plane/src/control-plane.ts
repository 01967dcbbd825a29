import { randomBytes } from 'node:crypto';
import {
  ADDRESS_TYPE_URL,
  type Authorization,
  convertAuthorizationPolicy,
  logger,
  WAYPOINT_CONFIG_TYPE_URL,
  ZmeshError,
} from '@zmesh/shared';
import type { SignCsr } from './ca-service.js';
import { Compiler } from './compiler.js';
import { ConfigStore, type StoreView } from './config-store.js';
import { type RolloutReport, setNamespaceWaypoint, waitForAcks } from './namespace-waypoint.js';
import { NodeTokens } from './node-tokens.js';
import type { ProxyReport } from './proxy-status.js';
import { MemoryStateStore, metaOrCreate, type StateStore } from './store/state-store.js';
import { XdsServer } from './xds-server.js';

export interface ControlPlaneOptions {
  /** Directory of YAML config; reloaded on change when `watch` is set. */
  configDir?: string;
  watch?: boolean;
  trustDomain: string;
  clusterDomain?: string;
  signCsr?: SignCsr;
  /** HMAC key for node tokens; default: the state store's (created there on first start). */
  tokenKey?: Buffer;
  /**
   * Applied objects, the generation, xDS version counters and the node-token key
   * (store/). Default: in memory, nothing survives the process.
   */
  state?: StateStore;
  /** Default: Istio's conversion (`convertAuthorizationPolicy`); waypoint-targeted policies are dropped. */
  convertPolicy?: (raw: Record<string, unknown>) => Authorization | undefined;
  maxCertTtlSeconds?: number;
}

const log = logger('control-plane');

/** The control plane: config store → compiler → xDS/CA server, wired together. */
export class ControlPlane {
  readonly store: ConfigStore;
  readonly server: XdsServer;
  readonly tokens: NodeTokens;
  readonly state: StateStore;
  readonly #compiler: Compiler;

  /** Throws ZM_ERR_STATE_STORE when the state store cannot be read. */
  constructor(opts: ControlPlaneOptions) {
    this.state = opts.state ?? new MemoryStateStore();
    this.store = new ConfigStore({
      state: this.state,
      ...(opts.configDir === undefined ? {} : { dir: opts.configDir }),
    });
    this.tokens = new NodeTokens(opts.tokenKey ?? nodeTokenKey(this.state));
    this.server = new XdsServer({
      tokens: this.tokens,
      ...(opts.signCsr ? { signCsr: opts.signCsr } : {}),
      ...(opts.maxCertTtlSeconds === undefined ? {} : { maxCertTtlSeconds: opts.maxCertTtlSeconds }),
    });
    this.#compiler = new Compiler({
      trustDomain: opts.trustDomain,
      ...(opts.clusterDomain ? { clusterDomain: opts.clusterDomain } : {}),
      convertPolicy: opts.convertPolicy ?? convertForZtunnel,
    });
    this.server.cache.seedVersions(storedVersions(this.state));
    this.store.on('change', (view: StoreView) => {
      this.server.setConfig(this.#compiler.compile(view));
      keepVersions(this.state, this.server.cache.versions());
    });
    if (opts.watch) this.store.watch();
  }

  /**
   * Loads the config directory and serves on loopback. A refused initial load is an error:
   * serving an empty config would make every resuming proxy drop what it holds. Without a
   * directory, proxies get their first response after the first `store.apply`.
   */
  async start(port = 0, host = '127.0.0.1'): Promise<number> {
    const loaded = await this.store.reload();
    if (!loaded.ok) {
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: 'config directory',
        reason: loaded.error.join('; '),
      });
    }
    return this.server.listen(port, host);
  }

  issueNodeToken(node: string): string {
    return this.tokens.issueNodeToken(node);
  }

  /**
   * `zmesh ns l7 on|off`: sets or removes the namespace's waypoint, pushes, and waits until
   * every connected proxy has ACKed the version that carries it (or `timeoutMs` passes).
   */
  async setNamespaceL7(
    namespace: string,
    waypoint: string | undefined,
    timeoutMs: number,
  ): Promise<{ ok: true; value: RolloutReport } | { ok: false; error: string[] }> {
    const applied = setNamespaceWaypoint(this.store, namespace, waypoint);
    if (!applied.ok) return applied;
    const version = this.server.cache.view(ADDRESS_TYPE_URL).version;
    const waypointVersion = this.server.cache.view(WAYPOINT_CONFIG_TYPE_URL).version;
    const split = await waitForAcks(() => this.proxyStatus(), version, timeoutMs, waypointVersion);
    return { ok: true, value: { namespace, waypoint: waypoint ?? null, version, ...split } };
  }

  proxyStatus(): ProxyReport[] {
    return this.server.proxyStatus();
  }

  async stop(): Promise<void> {
    this.store.close();
    await this.server.close();
    this.state.close();
  }
}

const TOKEN_KEY = 'node-token-key';
const XDS_VERSIONS = 'xds-versions';

function nodeTokenKey(state: StateStore): Buffer {
  return Buffer.from(
    metaOrCreate(state, TOKEN_KEY, () => randomBytes(32).toString('base64')),
    'base64',
  );
}

function storedVersions(state: StateStore): Record<string, number> {
  const kept = state.getMeta(XDS_VERSIONS);
  if (kept === undefined) return {};
  try {
    return JSON.parse(kept) as Record<string, number>;
  } catch {
    log.warn('stored xDS versions unreadable; versions restart at 1');
    return {};
  }
}

/** Version counters are kept so they keep increasing across restarts; losing the last one is harmless. */
function keepVersions(state: StateStore, versions: Record<string, number>): void {
  const text = JSON.stringify(versions);
  if (state.getMeta(XDS_VERSIONS) === text) return;
  try {
    state.putMeta({ [XDS_VERSIONS]: text });
  } catch (e) {
    log.warn({ err: (e as Error).message }, 'could not keep xDS versions');
  }
}

function convertForZtunnel(raw: Record<string, unknown>): Authorization | undefined {
  const converted = convertAuthorizationPolicy(raw);
  if (!converted.ok) {
    log.warn({ reasons: converted.error }, 'AuthorizationPolicy not served');
    return undefined;
  }
  if (converted.value.warnings.length > 0)
    log.warn({ warnings: converted.value.warnings }, 'AuthorizationPolicy');
  return converted.value.target === 'ztunnel' ? converted.value.authorization : undefined;
}
