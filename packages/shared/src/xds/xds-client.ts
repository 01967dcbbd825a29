import { EventEmitter } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import type { Registry } from 'prom-client';
import { ZmeshError } from '../errors/zmesh-error.js';
import { logger } from '../log/index.js';
import {
  ADS_METHOD,
  type DeltaRequest,
  type DeltaResponse,
  deltaRequestCodec,
  deltaResponseCodec,
  toStruct,
} from './ads-messages.js';
import {
  advanceSnapshot,
  buildSnapshot,
  type ConfigSnapshot,
  EMPTY_STATE,
  type PendingResource,
} from './config-snapshot.js';
import { applyBatch, decodeResources, type RawResource } from './resource-decoder.js';
import { loadSnapshot, readCurrentStamp, writeCurrentStamp, writeSnapshot } from './snapshot-file.js';
import { splitAddresses } from './token-file.js';
import { ControlPlaneChannels, type MeshRoots, tlsFailure } from './transport.js';
import { typeLabel, XdsMetrics } from './xds-metrics.js';

const log = logger('xds-client');

/** A full Address snapshot of 10,000 workloads is ~3 MB; grpc-js's 4 MiB default is too tight. */
export const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;
/** Caps the backoff exponent so 2^n never overflows; the delay itself is capped by backoff.maxMs. */
const MAX_BACKOFF_EXPONENT = 30;
const KEEPALIVE_MS = 30_000;
/** While synced, the "last known current" stamp is refreshed this often (a few bytes). */
const CURRENT_STAMP_EVERY_MS = 30_000;
/** google.rpc.Code INVALID_ARGUMENT, the status a NACK carries. */
const INVALID_ARGUMENT = 3;

/**
 * One subscribed type outside the ConfigSnapshot (the waypoint's WaypointConfig): its owner
 * decodes, validates and applies each response; the client does the protocol around it
 * (subscription, ACK/NACK, reconnect, metrics).
 */
export interface XdsSubscription {
  readonly typeUrl: string;
  /** Resource names subscribed to; the wildcard when absent. */
  readonly names?: readonly string[];
  /** Resource name → version of what is held: sent as initial_resource_versions, so a reconnect resends only news. */
  versions(): Record<string, string>;
  /**
   * Validates the response's resources and applies what it accepts (a refused resource
   * changes nothing); returns every reason, each `<name>: <reason>`, for the NACK.
   */
  apply(resources: readonly RawResource[], removed: readonly string[]): string[];
}

export interface XdsClientOptions {
  /**
   * The control plane: `host:port` or `unix:<path>`; several, comma-separated (`--xds a,b`),
   * are tried in turn: each stream end moves to the next, with the same jittered backoff.
   */
  address: string;
  node: { id: string; cluster?: string; metadata?: Record<string, string | number | boolean> };
  /** Node bootstrap token, sent as `authorization: Bearer <token>` metadata; read at each connect. */
  token: string | (() => string);
  /**
   * Called when the control plane refuses the token (UNAUTHENTICATED), before the next
   * attempt: re-reads the token file, so a re-minted token is used without a restart.
   */
  refreshToken?: () => Promise<unknown>;
  /** ConfigSnapshot types (Address, Authorization), subscribed with the wildcard. */
  typeUrls: readonly string[];
  /** Types applied by their owner, not part of the snapshot. */
  subscriptions?: readonly XdsSubscription[];
  /**
   * Forces these credentials for every address (tests). Without them each address follows
   * the transport rule (transport.ts): plaintext on loopback and Unix sockets, else TLS
   * verified against `roots`.
   */
  credentials?: grpc.ChannelCredentials;
  /** The mesh roots a TLS control plane's certificate must lead to; a new generation rebuilds the channel. */
  roots?: MeshRoots;
  /** Largest response accepted; default MAX_RESPONSE_BYTES. */
  maxResponseBytes?: number;
  snapshotPath?: string;
  backoff: { initialMs: number; maxMs: number };
  registry?: Registry;
  /** An on-disk snapshot older than this is refused at start (docs/design.md §5: bounded age). */
  maxSnapshotAgeMs?: number;
  now?: () => number;
}

/** A week: older than any certificate a proxy could still hold, so such config is not worth serving. */
export const DEFAULT_MAX_SNAPSHOT_AGE_MS = 7 * 24 * 3600 * 1000;

export interface NackEvent {
  typeUrl: string;
  nonce: string;
  reasons: string[];
}

/**
 * The delta ADS client of ztunnel and waypoint, with per-type subscriptions. For the
 * snapshot types (`typeUrls`) each response is decoded and validated off to the side;
 * valid resources are applied in one atomic swap of the `ConfigSnapshot`, invalid ones are
 * NACKed with every reason and change nothing (docs/design.md §5). Other types (`subscriptions`)
 * are applied by their owner, NACKed with the reasons it returns. Events: 'snapshot',
 * 'response', 'ack', 'nack', 'connected', 'synced', 'disconnected', 'written', 'loadFailed'.
 * A stopped client is not restarted: make a new one.
 */
export class XdsClient extends EventEmitter {
  readonly #opts: XdsClientOptions;
  /** One channel per control-plane address (rebuilt when the mesh roots move); `#at` is the one in use. */
  readonly #channels: ControlPlaneChannels;
  #at = 0;
  readonly #metrics: XdsMetrics | undefined;
  /** Every subscribed type: the snapshot's, then the owner-applied ones. */
  readonly #types: ReadonlySet<string>;
  readonly #subscriptions: ReadonlyMap<string, XdsSubscription>;
  #snapshot: ConfigSnapshot = buildSnapshot(EMPTY_STATE, 0);
  #call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse> | undefined;
  #current = false;
  /** Types that have received at least one response on the current stream. */
  #answered = new Set<string>();
  #attempt = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  readonly #now: () => number;
  #disconnectedSince: number;
  #lastCurrentAt: number;
  /** A complete snapshot is held: synced once, or adopted from disk. */
  #complete = false;
  #writing: Promise<void> | undefined;
  #dirty = false;
  #stampTimer: NodeJS.Timeout | undefined;

  constructor(opts: XdsClientOptions) {
    super();
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#disconnectedSince = this.#now();
    this.#lastCurrentAt = this.#now();
    this.#subscriptions = new Map((opts.subscriptions ?? []).map((s) => [s.typeUrl, s]));
    this.#types = new Set([...opts.typeUrls, ...this.#subscriptions.keys()]);
    this.#channels = new ControlPlaneChannels(splitAddresses(opts.address), {
      ...(opts.roots ? { roots: opts.roots } : {}),
      ...(opts.credentials ? { credentials: opts.credentials } : {}),
      options: {
        'grpc.max_receive_message_length': opts.maxResponseBytes ?? MAX_RESPONSE_BYTES,
        'grpc.keepalive_time_ms': KEEPALIVE_MS,
        'grpc.initial_reconnect_backoff_ms': opts.backoff.initialMs,
        'grpc.max_reconnect_backoff_ms': opts.backoff.maxMs,
      },
    });
    this.#metrics =
      opts.registry &&
      new XdsMetrics(opts.registry, {
        disconnectedSeconds: () =>
          this.#call && this.#current ? 0 : (this.#now() - this.#disconnectedSince) / 1000,
        snapshotAgeSeconds: () => this.snapshotAgeMs() / 1000,
      });
  }

  /** Loads the on-disk snapshot (if any and intact), then connects. */
  async start(): Promise<void> {
    if (this.#opts.snapshotPath !== undefined) {
      await this.#loadFromDisk(this.#opts.snapshotPath);
      this.#stampTimer = setInterval(() => {
        if (this.synced) this.#stamp(this.#now());
      }, CURRENT_STAMP_EVERY_MS);
      this.#stampTimer.unref();
    }
    this.#connect();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearInterval(this.#stampTimer);
    if (this.synced) this.#stamp(this.#now());
    this.#call?.cancel();
    this.#call = undefined;
    this.#channels.close();
    await this.flush();
  }

  snapshot(): ConfigSnapshot {
    return this.#snapshot;
  }

  pending(): readonly PendingResource[] {
    return this.#snapshot.pending;
  }

  /**
   * How long ago the held config was last known current: 0 while synced, else since the
   * stream was lost (or since the on-disk snapshot was written). Authorization staleness and
   * the snapshot-age metric read this.
   */
  snapshotAgeMs(): number {
    return this.synced ? 0 : Math.max(0, this.#now() - this.#lastCurrentAt);
  }

  /** A complete snapshot is held (synced at least once, or adopted from disk): readiness needs it. */
  get complete(): boolean {
    return this.#complete;
  }

  get connected(): boolean {
    return this.#current;
  }

  /**
   * Connected and every subscribed type has been answered on this stream: the snapshot is
   * complete and current (what readiness waits for, docs/design.md §5).
   */
  get synced(): boolean {
    return this.#current && this.#answered.size === this.#types.size;
  }

  /** Resolves when every scheduled snapshot write has reached the disk. */
  async flush(): Promise<void> {
    while (this.#writing) await this.#writing;
  }

  async #loadFromDisk(path: string): Promise<void> {
    const loaded = await loadSnapshot(path);
    if (!loaded.ok) {
      if (!loaded.error[0]?.includes('ENOENT'))
        log.warn({ path, reasons: loaded.error }, 'on-disk snapshot refused');
      this.emit('loadFailed', loaded.error);
      return;
    }
    const stamp = await readCurrentStamp(path, this.#now());
    const lastCurrent = Math.max(loaded.value.activatedAt, stamp ?? 0);
    const maxAge = this.#opts.maxSnapshotAgeMs ?? DEFAULT_MAX_SNAPSHOT_AGE_MS;
    const age = this.#now() - lastCurrent;
    if (age > maxAge) {
      const reason = `snapshot ${path} is ${Math.round(age / 1000)} s old, over the ${maxAge / 1000} s bound`;
      log.warn({ path, age }, 'on-disk snapshot refused: too old');
      this.emit('loadFailed', [reason]);
      return;
    }
    this.#lastCurrentAt = lastCurrent;
    this.#complete = true;
    this.#swap(loaded.value);
  }

  #connect(): void {
    if (this.#stopped) return;
    const metadata = new grpc.Metadata();
    const token = this.#opts.token;
    metadata.set('authorization', `Bearer ${typeof token === 'string' ? token : token()}`);
    const call = this.#channels
      .get(this.#at)
      .makeBidiStreamRequest(
        ADS_METHOD,
        deltaRequestCodec.serialize,
        deltaResponseCodec.deserialize,
        metadata,
      );
    this.#call = call;
    call.on('metadata', () => this.#markConnected(call));
    call.on('data', (res: DeltaResponse) => this.#onResponse(call, res));
    call.on('error', (e: grpc.ServiceError) =>
      log.debug({ code: e.code, details: e.details }, 'stream error'),
    );
    call.on('status', (s: grpc.StatusObject) => this.#onStreamEnd(call, s));
    [...this.#types].forEach((typeUrl, i) => {
      const sub = this.#subscriptions.get(typeUrl);
      const request: DeltaRequest = {
        typeUrl,
        resourceNamesSubscribe: sub?.names ? [...sub.names] : ['*'],
        initialResourceVersions: sub
          ? sub.versions()
          : Object.fromEntries(this.#snapshot.versions[typeUrl] ?? []),
      };
      // The node is sent once per stream, on its first request (xDS protocol, "Delta xDS").
      if (i === 0) request.node = this.#wireNode();
      call.write(request);
    });
  }

  #wireNode(): DeltaRequest['node'] {
    const { id, cluster, metadata } = this.#opts.node;
    return { id, cluster: cluster ?? '', ...(metadata ? { metadata: toStruct(metadata) } : {}) };
  }

  #markConnected(call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse>): void {
    if (call !== this.#call || this.#current) return;
    this.#current = true;
    this.#metrics?.connected.set(1);
    log.info({ address: this.#channels.addresses[this.#at]! }, 'xds connected');
    this.emit('connected');
  }

  #onStreamEnd(call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse>, status: grpc.StatusObject): void {
    if (call !== this.#call) return;
    this.#call = undefined;
    this.#answered = new Set();
    if (this.#current) {
      this.#current = false;
      this.#disconnectedSince = this.#now();
      this.#lastCurrentAt = this.#now();
      this.#stamp(this.#lastCurrentAt);
    }
    this.#metrics?.connected.set(0);
    this.#metrics?.streamEnds.inc({ code: grpc.status[status.code] ?? String(status.code) });
    if (this.#stopped) return;
    const delay = this.#nextDelay();
    const address = this.#channels.addresses[this.#at]!;
    const refused = tlsFailure(address, status);
    if (refused !== undefined) {
      this.#metrics?.tlsRefusals.inc();
      const e = new ZmeshError('ZM_ERR_XDS_TLS_REFUSED', { address, reason: refused });
      log.warn({ code: e.code, address }, e.message);
      this.emit('tlsRefused', { address, reason: refused });
    }
    // Another replica may be up where this one is not (or restarting): try the next address.
    this.#at = (this.#at + 1) % this.#channels.addresses.length;
    log.warn(
      {
        address,
        code: status.code,
        details: status.details,
        retryInMs: Math.round(delay),
        ...(this.#channels.addresses.length > 1 ? { next: this.#channels.addresses[this.#at]! } : {}),
      },
      'xds stream ended',
    );
    this.emit('disconnected', { code: status.code, details: status.details });
    const refresh = status.code === grpc.status.UNAUTHENTICATED ? this.#opts.refreshToken : undefined;
    this.#timer = setTimeout(() => {
      if (refresh === undefined) this.#connect();
      else
        void refresh()
          .catch(() => undefined)
          .then(() => this.#connect());
    }, delay);
  }

  #nextDelay(): number {
    return backoffDelay(this.#attempt++, this.#opts.backoff);
  }

  #onResponse(call: grpc.ClientDuplexStream<DeltaRequest, DeltaResponse>, res: DeltaResponse): void {
    if (call !== this.#call) return;
    this.#markConnected(call);
    // Backoff resets on a response, not on headers: a server that accepts and then
    // refuses the stream must not be retried at the initial rate forever.
    this.#attempt = 0;
    const typeUrl = res.typeUrl ?? '';
    const nonce = res.nonce ?? '';
    this.emit('response', {
      typeUrl,
      nonce,
      names: (res.resources ?? []).map((r) => r.name ?? ''),
      removed: res.removedResources ?? [],
    });
    const reasons = this.#types.has(typeUrl)
      ? this.#apply(typeUrl, res)
      : [`type ${typeUrl} was not subscribed`];
    this.#lastCurrentAt = this.#now();
    this.#noteAnswered(typeUrl);
    const label = { type: typeLabel(typeUrl) };
    if (reasons.length === 0) {
      call.write({ typeUrl, responseNonce: nonce });
      this.#metrics?.acks.inc(label);
      this.emit('ack', { typeUrl, nonce });
      return;
    }
    const message = reasons.join('; ');
    call.write({ typeUrl, responseNonce: nonce, errorDetail: { code: INVALID_ARGUMENT, message } });
    this.#metrics?.nacks.inc(label);
    log.warn({ typeUrl, nonce, reasons }, 'xds response rejected');
    this.emit('nack', { typeUrl, nonce, reasons } satisfies NackEvent);
  }

  #noteAnswered(typeUrl: string): void {
    if (!this.#types.has(typeUrl) || this.#answered.has(typeUrl)) return;
    this.#answered.add(typeUrl);
    if (!this.synced) return;
    this.#complete = true;
    this.#stamp(this.#now());
    this.emit('synced', this.#snapshot);
  }

  /** Validates the response off to the side and applies its valid part; returns the reject reasons. */
  #apply(typeUrl: string, res: DeltaResponse): string[] {
    const raws: RawResource[] = (res.resources ?? []).map((r) => ({
      name: r.name ?? '',
      version: r.version ?? '',
      typeUrl: r.resource?.type_url ?? '',
      bytes: r.resource?.value ?? new Uint8Array(),
    }));
    const removed = res.removedResources ?? [];
    const sub = this.#subscriptions.get(typeUrl);
    if (sub !== undefined) {
      try {
        return sub.apply(raws, removed);
      } catch (e) {
        // The owner's bug must not escape into grpc's event handler: refuse the response instead.
        log.error({ typeUrl, err: (e as Error).message }, 'applying an xds response threw');
        return [`${typeUrl}: ${(e as Error).message}`];
      }
    }
    const batch = decodeResources(typeUrl, raws);
    if (batch.addresses.size + batch.authorizations.size + removed.length > 0) {
      const state = applyBatch(this.#snapshot.accepted, typeUrl, batch, removed);
      const changed = [...batch.addresses.keys(), ...batch.authorizations.keys()];
      this.#swap(advanceSnapshot(this.#snapshot, state, typeUrl, changed, removed, this.#now()));
      this.#scheduleWrite();
    }
    return batch.reasons;
  }

  #swap(snapshot: ConfigSnapshot): void {
    this.#snapshot = snapshot;
    this.#metrics?.pendingResources.set(snapshot.pending.length);
    this.emit('snapshot', snapshot);
  }

  /** Records "last known current" beside the snapshot; best effort (a lost stamp only ages config sooner). */
  #stamp(at: number): void {
    const path = this.#opts.snapshotPath;
    if (path === undefined) return;
    writeCurrentStamp(path, at).catch((e: unknown) =>
      log.debug({ path, err: (e as Error).message }, 'current stamp write failed'),
    );
  }

  /** At most one write in flight; activations during it collapse into one more write. */
  #scheduleWrite(): void {
    if (this.#opts.snapshotPath === undefined) return;
    this.#dirty = true;
    this.#writing ??= this.#drainWrites(this.#opts.snapshotPath);
  }

  async #drainWrites(path: string): Promise<void> {
    while (this.#dirty) {
      this.#dirty = false;
      try {
        await writeSnapshot(path, this.#snapshot);
        this.emit('written', path);
      } catch (e) {
        log.warn({ path, err: (e as Error).message }, 'snapshot write failed');
      }
    }
    this.#writing = undefined;
  }
}

/**
 * Exponential backoff with "equal jitter": half of the capped exponential delay is fixed,
 * half random, so reconnecting proxies spread out but none retries at once.
 */
export function backoffDelay(
  attempt: number,
  backoff: { initialMs: number; maxMs: number },
  random: () => number = Math.random,
): number {
  const base = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(attempt, MAX_BACKOFF_EXPONENT));
  return base / 2 + (random() * base) / 2;
}
