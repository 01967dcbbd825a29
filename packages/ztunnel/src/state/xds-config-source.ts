import { EventEmitter } from 'node:events';
import type * as grpc from '@grpc/grpc-js';
import {
  ADDRESS_TYPE_URL,
  AUTHORIZATION_TYPE_URL,
  type ConfigSnapshot,
  logger,
  type MeshRoots,
  type PendingResource,
  XdsClient,
} from '@zmesh/shared';
import type { ConfigTarget, ConfigUpdate } from './config-target.js';
import type { ForwardListener as ForwardConfig } from './local-config.js';

const log = logger('xds-source');

const DEFAULT_XDS_BACKOFF = { initialMs: 500, maxMs: 30_000 };

export interface XdsConfigSourceOptions {
  /**
   * The proxy fed. When it has them, the source also wires authorization staleness to its
   * snapshot age and readiness to snapshot completeness (docs/design.md §5).
   */
  ztunnel: ConfigTarget;
  /** `host:port` of the control plane's ADS; several, comma-separated, fail over in turn. */
  address: string;
  node: string;
  /** ztunnel's own address, for the Istio-style proxy id. */
  proxyAddress: string;
  /** `host:port` of ztunnel's admin endpoint, told to the control plane (ADMIN_ADDRESS) for `zmesh ztunnel-config --node`. */
  adminAddress?: string;
  /** The node token, read at each connect (a function when it can change: the token file). */
  token: string | (() => string);
  /** Re-reads the token when the control plane refuses it (see XdsClientOptions). */
  refreshToken?: () => Promise<unknown>;
  /** Last-known-good snapshot file (docs/design.md §5); loaded at start, rewritten on every activation. */
  snapshotPath?: string;
  /** Explicit-proxy mode: forward listeners come from the local file, not from xDS. */
  forwards?: readonly ForwardConfig[];
  /** Forces these credentials; by default loopback is plaintext and any other address TLS verified against `roots`. */
  credentials?: grpc.ChannelCredentials;
  /** The mesh roots a TLS control plane must present a certificate from (the proxy's TrustBundle). */
  roots?: MeshRoots;
  backoff?: { initialMs: number; maxMs: number };
  /** An on-disk snapshot older than this is refused at start. */
  maxSnapshotAgeMs?: number;
  /** Authorization last-known-good limit; default: the workload certificate lifetime. */
  authzMaxStalenessMs?: number;
}

export interface AppliedEvent {
  version: number;
  workloads: number;
  services: number;
  policies: number;
  pending: number;
}

/**
 * Feeds a Ztunnel from the control plane: every activated ConfigSnapshot (from ADS, or the
 * on-disk one at start) becomes one `applyConfig`. Snapshots that arrive while an apply is
 * running collapse into the newest, so the proxy never queues stale configurations.
 * Events: 'applied' (AppliedEvent, ConfigSnapshot), 'refused' (reasons), 'loadFailed' (reasons).
 */
export class XdsConfigSource extends EventEmitter {
  readonly client: XdsClient;
  readonly #opts: XdsConfigSourceOptions;
  #next: ConfigSnapshot | undefined;
  #applying: Promise<void> | undefined;
  #forwardsSent = false;
  #lastRefusal: string[] | undefined;
  #loadFailure: string[] | undefined;
  #applied: ConfigSnapshot | undefined;

  constructor(opts: XdsConfigSourceOptions) {
    super();
    this.#opts = opts;
    this.client = new XdsClient({
      address: opts.address,
      node: {
        id: `ztunnel~${opts.proxyAddress}~ztunnel-${opts.node}.istio-system~istio-system.svc.cluster.local`,
        metadata: {
          NODE_NAME: opts.node,
          ...(opts.adminAddress === undefined ? {} : { ADMIN_ADDRESS: opts.adminAddress }),
        },
      },
      token: opts.token,
      ...(opts.refreshToken ? { refreshToken: opts.refreshToken } : {}),
      typeUrls: [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL],
      ...(opts.credentials ? { credentials: opts.credentials } : {}),
      ...(opts.roots ? { roots: opts.roots } : {}),
      backoff: opts.backoff ?? DEFAULT_XDS_BACKOFF,
      registry: opts.ztunnel.metrics.registry,
      ...(opts.snapshotPath === undefined ? {} : { snapshotPath: opts.snapshotPath }),
      ...(opts.maxSnapshotAgeMs === undefined ? {} : { maxSnapshotAgeMs: opts.maxSnapshotAgeMs }),
    });
    this.#wireValidity(opts);
    this.client.on('snapshot', (s: ConfigSnapshot) => this.#schedule(s));
    this.client.on('loadFailed', (reasons: string[]) => this.#onLoadFailed(reasons));
  }

  /** Adopts an intact on-disk snapshot (if any), then connects; does not wait for the server. */
  async start(): Promise<void> {
    await this.client.start();
  }

  async stop(): Promise<void> {
    await this.client.stop();
    await this.idle();
  }

  /** Resources accepted but waiting for a reference (a waypoint not yet received): for /config_dump. */
  pending(): readonly PendingResource[] {
    return this.client.pending();
  }

  /** Connected and every type answered: the config is complete and current. */
  get synced(): boolean {
    return this.client.synced;
  }

  /** Why readiness must wait for config, if it must: nothing complete from the server or the disk yet. */
  incompleteReason(): string | undefined {
    if (this.client.complete && !this.#applying) return undefined;
    return this.client.connected
      ? 'configuration incomplete: waiting for the control plane to answer every type'
      : 'no configuration: control plane unreachable and no usable on-disk snapshot';
  }

  /** Why the last snapshot was refused by the proxy (an invalid policy set), if it was. */
  get lastRefusal(): readonly string[] | undefined {
    return this.#lastRefusal;
  }

  /** The snapshot the proxy last applied (what its traffic acts on now). */
  appliedSnapshot(): ConfigSnapshot | undefined {
    return this.#applied;
  }

  /** Why the on-disk snapshot was ignored at start, if it was (a missing file is not a failure). */
  get loadFailure(): readonly string[] | undefined {
    return this.#loadFailure;
  }

  /** What /config_dump shows about the xDS side. */
  status(): {
    connected: boolean;
    synced: boolean;
    pending: readonly PendingResource[];
    refused?: string[];
    snapshotLoadFailure?: string[];
  } {
    return {
      connected: this.client.connected,
      synced: this.client.synced,
      pending: this.pending(),
      ...(this.#lastRefusal ? { refused: [...this.#lastRefusal] } : {}),
      ...(this.#loadFailure ? { snapshotLoadFailure: [...this.#loadFailure] } : {}),
    };
  }

  /** Resolves once every snapshot received so far has been applied. */
  async idle(): Promise<void> {
    while (this.#applying) await this.#applying;
  }

  #wireValidity(opts: XdsConfigSourceOptions): void {
    const z = opts.ztunnel;
    z.setConfigReadiness?.(() => this.incompleteReason());
    const certs = z.certs;
    z.authorizer?.setStaleness({
      ageMs: () => this.client.snapshotAgeMs(),
      maxMs: () => opts.authzMaxStalenessMs ?? certs?.lifetimeMs() ?? Number.POSITIVE_INFINITY,
    });
  }

  #schedule(snapshot: ConfigSnapshot): void {
    this.#next = snapshot;
    this.#applying ??= this.#drain();
  }

  async #drain(): Promise<void> {
    while (this.#next) {
      const snapshot = this.#next;
      this.#next = undefined;
      try {
        await this.#apply(snapshot);
      } catch (e) {
        log.error({ err: (e as Error).message }, 'applying the xDS snapshot failed');
      }
    }
    this.#applying = undefined;
  }

  async #apply(snapshot: ConfigSnapshot): Promise<void> {
    const update: ConfigUpdate = {
      workloads: [...snapshot.workloads.values()],
      services: [...snapshot.services.values()],
      policies: [...snapshot.authorizations.values()],
      ...(this.#opts.forwards && !this.#forwardsSent ? { forwards: this.#opts.forwards } : {}),
    };
    const result = await this.#opts.ztunnel.applyConfig(update);
    if (!result.ok) {
      // The xDS client already validated each policy; a refusal here is a model mismatch.
      this.#lastRefusal = result.error;
      log.error({ reasons: result.error }, 'xDS snapshot refused by the proxy; previous config stays');
      this.emit('refused', result.error);
      return;
    }
    this.#forwardsSent = true;
    this.#lastRefusal = undefined;
    this.#applied = snapshot;
    const applied: AppliedEvent = {
      version: result.value,
      workloads: update.workloads.length,
      services: update.services.length,
      policies: update.policies?.length ?? 0,
      pending: snapshot.pending.length,
    };
    log.debug(applied, 'xDS snapshot applied');
    this.emit('applied', applied, snapshot);
  }

  #onLoadFailed(reasons: string[]): void {
    if (reasons[0]?.includes('ENOENT')) return;
    this.#loadFailure = reasons;
    log.error(
      { path: this.#opts.snapshotPath, reasons },
      'on-disk snapshot is damaged and was IGNORED: starting without config until the control plane answers',
    );
    this.emit('loadFailed', reasons);
  }
}
