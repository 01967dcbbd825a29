import { EventEmitter } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import {
  ADS_METHOD,
  backoffDelay,
  type DeltaRequest,
  type DeltaResponse,
  decodeWaypointResource,
  deltaRequestCodec,
  deltaResponseCodec,
  logger,
  type Result,
  toStruct,
  WAYPOINT_CONFIG_TYPE_URL,
} from '@zmesh/shared';
import type { WaypointConfig } from '../config/waypoint-config.js';

const log = logger('waypoint-xds');

/** google.rpc.Code INVALID_ARGUMENT, the status a NACK carries. */
const INVALID_ARGUMENT = 3;
const KEEPALIVE_MS = 30_000;
/** A whole namespace's config; far above any real one (the server's limit is the same). */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

export interface WaypointXdsSourceOptions {
  /** What applies a decoded config: `Waypoint.applyConfig` (invalid input changes nothing). */
  apply: (doc: unknown, source: string) => Result<WaypointConfig>;
  /** `host:port` or `unix:/path` of the control plane's ADS. */
  address: string;
  /** `<namespace>/<gateway name>`: the one resource subscribed to. */
  resourceName: string;
  node: { id: string; metadata?: Record<string, string> };
  token: string;
  backoff?: { initialMs: number; maxMs: number };
  credentials?: grpc.ChannelCredentials;
}

/**
 * The waypoint's delta ADS subscription to its own `zmesh.waypoint.WaypointConfig`
 * (docs/xds.md). Each version is applied whole or NACKed with every reason, keeping the
 * config in force. A removed resource (its Gateway deleted) keeps the last config too: a
 * waypoint without config would drop traffic that ztunnels still send it.
 * Events: 'applied' (version), 'nack' (reasons), 'disconnected' ({code, details}).
 */
export class WaypointXdsSource extends EventEmitter {
  readonly #opts: WaypointXdsSourceOptions;
  readonly #client: grpc.Client;
  #call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse> | undefined;
  /** Version last applied: sent as initial_resource_versions so a reconnect resends only news. */
  #version: string | undefined;
  #attempt = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(opts: WaypointXdsSourceOptions) {
    super();
    this.#opts = opts;
    this.#client = new grpc.Client(opts.address, opts.credentials ?? grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': MAX_RESPONSE_BYTES,
      'grpc.keepalive_time_ms': KEEPALIVE_MS,
    });
  }

  /** Version of the config in force, undefined before the first one. */
  get version(): string | undefined {
    return this.#version;
  }

  start(): void {
    this.#connect();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#call?.cancel();
    this.#call = undefined;
    this.#client.close();
  }

  #connect(): void {
    if (this.#stopped) return;
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${this.#opts.token}`);
    const call = this.#client.makeBidiStreamRequest(
      ADS_METHOD,
      deltaRequestCodec.serialize,
      deltaResponseCodec.deserialize,
      metadata,
    );
    this.#call = call;
    call.on('data', (res: DeltaResponse) => this.#onResponse(call, res));
    call.on('error', (e: grpc.ServiceError) =>
      log.debug({ code: e.code, details: e.details }, 'stream error'),
    );
    call.on('status', (s: grpc.StatusObject) => this.#onEnd(call, s));
    const { id, metadata: nodeMeta } = this.#opts.node;
    call.write({
      node: { id, cluster: '', ...(nodeMeta ? { metadata: toStruct(nodeMeta) } : {}) },
      typeUrl: WAYPOINT_CONFIG_TYPE_URL,
      resourceNamesSubscribe: [this.#opts.resourceName],
      initialResourceVersions: this.#version ? { [this.#opts.resourceName]: this.#version } : {},
    });
  }

  #onEnd(call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse>, s: grpc.StatusObject): void {
    if (call !== this.#call || this.#stopped) return;
    this.#call = undefined;
    const delay = backoffDelay(this.#attempt++, this.#opts.backoff ?? { initialMs: 500, maxMs: 30_000 });
    log.warn({ code: s.code, details: s.details, retryInMs: Math.round(delay) }, 'xds stream ended');
    this.emit('disconnected', { code: s.code, details: s.details });
    this.#timer = setTimeout(() => this.#connect(), delay);
  }

  #onResponse(call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse>, res: DeltaResponse): void {
    if (call !== this.#call) return;
    this.#attempt = 0;
    const nonce = res.nonce ?? '';
    const reasons = this.#apply(res);
    if (reasons.length === 0) {
      call.write({ typeUrl: WAYPOINT_CONFIG_TYPE_URL, responseNonce: nonce });
      return;
    }
    const message = reasons.join('; ');
    call.write({
      typeUrl: WAYPOINT_CONFIG_TYPE_URL,
      responseNonce: nonce,
      errorDetail: { code: INVALID_ARGUMENT, message },
    });
    this.emit('nack', reasons);
  }

  /** Every reason this response is refused, each as `<name>: <reason>` (what the server's NACK parsing expects). */
  #apply(res: DeltaResponse): string[] {
    const name = this.#opts.resourceName;
    if (res.typeUrl !== WAYPOINT_CONFIG_TYPE_URL) return [`${name}: unexpected type ${res.typeUrl}`];
    if ((res.removedResources ?? []).includes(name))
      log.warn({ name }, 'waypoint config removed by the control plane; the last one stays in force');
    const mine = (res.resources ?? []).find((r) => r.name === name);
    if (mine === undefined) return [];
    if (mine.resource?.type_url !== WAYPOINT_CONFIG_TYPE_URL)
      return [`${name}: payload type ${mine.resource?.type_url}`];
    const doc = decodeWaypointResource(mine.resource.value ?? new Uint8Array());
    const applied = doc.ok ? this.#opts.apply(doc.value, 'xds') : doc;
    if (!applied.ok) return applied.error.map((r) => `${name}: ${r}`);
    this.#version = mine.version ?? '';
    this.emit('applied', this.#version);
    return [];
  }
}
