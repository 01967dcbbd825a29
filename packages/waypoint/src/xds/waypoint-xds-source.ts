import { EventEmitter } from 'node:events';
import type * as grpc from '@grpc/grpc-js';
import {
  decodeWaypointResource,
  logger,
  type MeshRoots,
  type NackEvent,
  type RawResource,
  type Result,
  WAYPOINT_CONFIG_TYPE_URL,
  XdsClient,
} from '@zmesh/shared';
import type { Registry } from 'prom-client';
import type { WaypointConfig } from '../config/waypoint-config.js';

const log = logger('waypoint-xds');

/** A whole namespace's config; far above any real one (the server's limit is the same). */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
const DEFAULT_BACKOFF = { initialMs: 500, maxMs: 30_000 };

export interface WaypointXdsSourceOptions {
  /** What applies a decoded config: `Waypoint.applyConfig` (invalid input changes nothing). */
  apply: (doc: unknown, source: string) => Result<WaypointConfig>;
  /** `host:port` or `unix:/path` of the control plane's ADS; several, comma-separated, fail over in turn. */
  address: string;
  /** `<namespace>/<gateway name>`: the one resource subscribed to. */
  resourceName: string;
  node: { id: string; metadata?: Record<string, string> };
  /** The node token, read at each connect (a function when it can change: the token file). */
  token: string | (() => string);
  /** Re-reads the token when the control plane refuses it (see XdsClientOptions). */
  refreshToken?: () => Promise<unknown>;
  backoff?: { initialMs: number; maxMs: number };
  /** Forces these credentials; by default loopback is plaintext and any other address TLS verified against `roots`. */
  credentials?: grpc.ChannelCredentials;
  /** The mesh roots a TLS control plane must present a certificate from (the proxy's TrustBundle). */
  roots?: MeshRoots;
  /** Where the xDS client's metrics (zmesh_xds_connected, …_stream_ends_total) go. */
  registry?: Registry;
}

/**
 * The waypoint's subscription to its own `zmesh.waypoint.WaypointConfig` (docs/xds.md), on
 * the shared delta ADS client: the client does the protocol (ACK/NACK, jittered reconnect,
 * resending the held version), this applies the resource. Each version is applied whole or
 * NACKed with every reason, keeping the config in force. A removed resource (its Gateway
 * deleted) keeps the last config too: a waypoint without config would drop traffic that
 * ztunnels still send it.
 * Events: 'applied' (version), 'nack' (reasons), 'disconnected' ({code, details}).
 */
export class WaypointXdsSource extends EventEmitter {
  readonly #opts: WaypointXdsSourceOptions;
  readonly #client: XdsClient;
  /** Version last applied: sent as initial_resource_versions so a reconnect resends only news. */
  #version: string | undefined;

  constructor(opts: WaypointXdsSourceOptions) {
    super();
    this.#opts = opts;
    const name = opts.resourceName;
    this.#client = new XdsClient({
      address: opts.address,
      node: { id: opts.node.id, ...(opts.node.metadata ? { metadata: opts.node.metadata } : {}) },
      token: opts.token,
      ...(opts.refreshToken ? { refreshToken: opts.refreshToken } : {}),
      typeUrls: [],
      subscriptions: [
        {
          typeUrl: WAYPOINT_CONFIG_TYPE_URL,
          names: [name],
          versions: () => (this.#version ? { [name]: this.#version } : {}),
          apply: (resources, removed) => this.#apply(resources, removed),
        },
      ],
      ...(opts.credentials ? { credentials: opts.credentials } : {}),
      ...(opts.roots ? { roots: opts.roots } : {}),
      maxResponseBytes: MAX_RESPONSE_BYTES,
      backoff: opts.backoff ?? DEFAULT_BACKOFF,
      ...(opts.registry ? { registry: opts.registry } : {}),
    });
    this.#client.on('nack', (e: NackEvent) => this.emit('nack', e.reasons));
    this.#client.on('disconnected', (e: { code: number; details: string }) => this.emit('disconnected', e));
  }

  /** Version of the config in force, undefined before the first one. */
  get version(): string | undefined {
    return this.#version;
  }

  start(): void {
    // Without a snapshot file the client connects before its first await: nothing to wait for.
    this.#client.start().catch((e: unknown) => log.error({ err: (e as Error).message }, 'xds start failed'));
  }

  stop(): Promise<void> {
    return this.#client.stop();
  }

  /** Every reason this response is refused, each as `<name>: <reason>` (what the server's NACK parsing expects). */
  #apply(resources: readonly RawResource[], removed: readonly string[]): string[] {
    const name = this.#opts.resourceName;
    if (removed.includes(name))
      log.warn({ name }, 'waypoint config removed by the control plane; the last one stays in force');
    const mine = resources.find((r) => r.name === name);
    if (mine === undefined) return [];
    if (mine.typeUrl !== WAYPOINT_CONFIG_TYPE_URL) return [`${name}: payload type ${mine.typeUrl}`];
    const doc = decodeWaypointResource(mine.bytes);
    const applied = doc.ok ? this.#opts.apply(doc.value, 'xds') : doc;
    if (!applied.ok) return applied.error.map((r) => `${name}: ${r}`);
    this.#version = mine.version;
    this.emit('applied', this.#version);
    return [];
  }
}
