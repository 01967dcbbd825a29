import { type Authorization, ZmeshError } from '@zmesh/shared';
import type { SignCsr } from './ca-service.js';
import { Compiler } from './compiler.js';
import { ConfigStore, type StoreView } from './config-store.js';
import { NodeTokens } from './node-tokens.js';
import type { ProxyReport } from './proxy-status.js';
import { XdsServer } from './xds-server.js';

export interface ControlPlaneOptions {
  /** Directory of YAML config; reloaded on change when `watch` is set. */
  configDir?: string;
  watch?: boolean;
  trustDomain: string;
  clusterDomain?: string;
  signCsr?: SignCsr;
  /** HMAC key for node tokens; keep it to keep issued tokens valid across restarts. */
  tokenKey?: Buffer;
  convertPolicy?: (raw: Record<string, unknown>) => Authorization | undefined;
  maxCertTtlSeconds?: number;
}

/** The control plane: config store → compiler → xDS/CA server, wired together. */
export class ControlPlane {
  readonly store: ConfigStore;
  readonly server: XdsServer;
  readonly tokens: NodeTokens;
  readonly #compiler: Compiler;

  constructor(opts: ControlPlaneOptions) {
    this.store = new ConfigStore(opts.configDir === undefined ? {} : { dir: opts.configDir });
    this.tokens = new NodeTokens(opts.tokenKey);
    this.server = new XdsServer({
      tokens: this.tokens,
      ...(opts.signCsr ? { signCsr: opts.signCsr } : {}),
      ...(opts.maxCertTtlSeconds === undefined ? {} : { maxCertTtlSeconds: opts.maxCertTtlSeconds }),
    });
    this.#compiler = new Compiler({
      trustDomain: opts.trustDomain,
      ...(opts.clusterDomain ? { clusterDomain: opts.clusterDomain } : {}),
      ...(opts.convertPolicy ? { convertPolicy: opts.convertPolicy } : {}),
    });
    this.store.on('change', (view: StoreView) => this.server.setConfig(this.#compiler.compile(view)));
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

  proxyStatus(): ProxyReport[] {
    return this.server.proxyStatus();
  }

  async stop(): Promise<void> {
    this.store.close();
    await this.server.close();
  }
}
