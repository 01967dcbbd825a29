import { isIP } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import {
  ADDRESS_TYPE_URL,
  ADS_METHOD,
  AUTHORIZATION_TYPE_URL,
  bindError,
  CA_METHOD,
  certificateRequestCodec,
  certificateResponseCodec,
  type DeltaRequest,
  deltaRequestCodec,
  deltaResponseCodec,
  encodeAddress,
  encodeAuthorization,
  encodeWaypointResource,
  formatHostPort,
  logger,
  policyKey,
  serviceKey,
  structString,
  WAYPOINT_CONFIG_TYPE_URL,
  type Workload,
  ZmeshError,
} from '@zmesh/shared';
import { AdsSession, type AdsStream } from './ads-session.js';
import { type CsrRefusal, createCertificateHandler, type SignCsr } from './ca-service.js';
import type { CompiledConfig } from './compiler.js';
import { authenticateNode, type NodeAuthenticator, type NodeTokens } from './node-tokens.js';
import { type ProxyReport, ProxyStatusRegistry } from './proxy-status.js';
import { type CachedResource, contentVersion, ResourceCache } from './resource-cache.js';

const log = logger('xds-server');

export const SERVED_TYPES: readonly string[] = [
  ADDRESS_TYPE_URL,
  AUTHORIZATION_TYPE_URL,
  WAYPOINT_CONFIG_TYPE_URL,
];
/** Dependencies first: services (and waypoints, which are services) before workloads naming them. */
const RANK_SERVICE = 0;
const RANK_WORKLOAD = 1;

export interface XdsServerOptions {
  tokens: NodeTokens;
  /** Serves the CA API when given; the CA library signs, this server only authorizes. */
  signCsr?: SignCsr;
  maxCertTtlSeconds?: number;
  /** Each certificate request refused before signing, by why (the control plane's metric). */
  onCsrRefused?: (reason: CsrRefusal) => void;
}

/**
 * Delta ADS and the CA API on one gRPC server: plaintext on loopback and Unix sockets only;
 * any other address is served with TLS (a serving certificate from the control plane's CA,
 * ServingCredentials) or refused.
 */
/** How long a stream with a refused token may take to name itself before it is closed anyway. */
const REFUSAL_WAIT_MS = 2000;

export class XdsServer {
  readonly cache = new ResourceCache();
  readonly proxies = new ProxyStatusRegistry();
  readonly #tokens: NodeTokens;
  /**
   * Besides node tokens, for xDS streams and certificate requests: in controller mode the
   * ztunnel's projected ServiceAccount token, checked with a TokenReview.
   */
  authenticator: NodeAuthenticator | undefined;
  readonly #server: grpc.Server;
  readonly #sessions = new Set<AdsSession>();
  #workloadsByNode = new Map<string, Workload[]>();
  /** Waypoint config name → nodes allowed to read it (where the waypoint's pods run). */
  #waypointNodes = new Map<string, ReadonlySet<string>>();
  /** Waypoint config name → the SPIFFE identity of its pods (a waypoint's own token reads only its config). */
  #waypointIdentities = new Map<string, string>();
  /**
   * No response before the first config: an empty answer to a proxy resuming with
   * initial_resource_versions would remove everything it holds (say, after a restart of
   * the control plane whose config has not loaded yet).
   */
  #primed = false;
  /** Compiled objects are immutable and reused for unchanged inputs: encode each once. */
  readonly #encoded = new WeakMap<object, CachedResource>();

  constructor(opts: XdsServerOptions) {
    this.#tokens = opts.tokens;
    this.#server = new grpc.Server({
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.http2.min_ping_interval_without_data_ms': 10_000,
    });
    this.#server.addService(
      {
        DeltaAggregatedResources: {
          path: ADS_METHOD,
          requestStream: true,
          responseStream: true,
          requestSerialize: deltaRequestCodec.serialize,
          requestDeserialize: deltaRequestCodec.deserialize,
          responseSerialize: deltaResponseCodec.serialize,
          responseDeserialize: deltaResponseCodec.deserialize,
        },
      },
      { DeltaAggregatedResources: (call: AdsStream) => this.#onStream(call) },
    );
    if (opts.signCsr) this.#addCaService(opts);
  }

  issueNodeToken(node: string): string {
    return this.#tokens.issueNodeToken(node);
  }

  /**
   * Installs a compiled config; proxies receive only what changed. `version`, when given,
   * is the version of every type that changes (a shared store's generation, the same on
   * every replica); else each type counts its own changes.
   */
  setConfig(config: CompiledConfig, version?: number): void {
    const addresses: CachedResource[] = [
      ...config.services.map((s) =>
        this.#memo(s, () =>
          cached(
            serviceKey(s),
            ADDRESS_TYPE_URL,
            encodeAddress({ kind: 'service', service: s }),
            RANK_SERVICE,
          ),
        ),
      ),
      ...config.workloads.map((w) =>
        this.#memo(w, () =>
          cached(w.uid, ADDRESS_TYPE_URL, encodeAddress({ kind: 'workload', workload: w }), RANK_WORKLOAD),
        ),
      ),
    ];
    const policies = config.authorizations.map((p) =>
      this.#memo(p, () => cached(policyKey(p), AUTHORIZATION_TYPE_URL, encodeAuthorization(p), 0)),
    );
    // Recompiled whole on every change (one small object per waypoint): encoded each time.
    // The readers are part of the version: a waypoint pod moving node re-sends (or withdraws) it.
    const waypoints = (config.waypoints ?? []).map((w) => {
      const bytes = encodeWaypointResource(w.config);
      const version = contentVersion(Buffer.concat([bytes, Buffer.from(`\n${w.nodes.join(',')}`)]));
      return { ...cached(w.name, WAYPOINT_CONFIG_TYPE_URL, bytes, 0), version };
    });
    const byNode = new Map<string, Workload[]>();
    for (const w of config.workloads) {
      const list = byNode.get(w.node);
      if (list) list.push(w);
      else byNode.set(w.node, [w]);
    }
    this.#workloadsByNode = byNode;
    this.#waypointNodes = new Map((config.waypoints ?? []).map((w) => [w.name, new Set(w.nodes)]));
    this.#waypointIdentities = new Map(
      (config.waypoints ?? []).map((w) => {
        const me = w.config.waypoint as { trustDomain: string; namespace: string; serviceAccount: string };
        return [w.name, `spiffe://${me.trustDomain}/ns/${me.namespace}/sa/${me.serviceAccount}`];
      }),
    );
    const addressesChanged = this.cache.replace(ADDRESS_TYPE_URL, addresses, version);
    const policiesChanged = this.cache.replace(AUTHORIZATION_TYPE_URL, policies, version);
    const waypointsChanged = this.cache.replace(WAYPOINT_CONFIG_TYPE_URL, waypoints, version);
    if (!this.#primed) {
      this.#primed = true;
      for (const s of this.#sessions) s.pushAll();
      return;
    }
    if (addressesChanged) this.#pushType(ADDRESS_TYPE_URL);
    if (policiesChanged) this.#pushType(AUTHORIZATION_TYPE_URL);
    if (waypointsChanged) this.#pushType(WAYPOINT_CONFIG_TYPE_URL);
  }

  /** Test hook: serves arbitrary bytes under a name, e.g. a malformed Address. */
  injectRawResource(typeUrl: string, name: string, bytes: Uint8Array): void {
    this.cache.put(typeUrl, cached(name, typeUrl, bytes, RANK_WORKLOAD));
    this.#pushType(typeUrl);
  }

  proxyStatus(): ProxyReport[] {
    return this.proxies.report(this.cache);
  }

  /**
   * Binds `host:port`, or a Unix socket when `host` is `unix:<absolute path>`: a socket file
   * reaches proxies in other network namespaces with no route, and its file mode (0600,
   * root) is the access control a plaintext loopback port cannot have. `tls` (the serving
   * certificate) is required for any host that is not loopback; with it, loopback is TLS too.
   */
  async listen(port = 0, host = '127.0.0.1', tls?: grpc.ServerCredentials): Promise<number> {
    if (tls === undefined && !isLoopback(host) && !isUnixAddress(host))
      throw new ZmeshError('ZM_ERR_XDS_BIND_REFUSED', { service: 'xDS/CA', host });
    const address = isUnixAddress(host) ? host : formatHostPort(host, port);
    const target = isUnixAddress(host) ? { path: host.slice('unix:'.length) } : { host, port };
    return new Promise((resolve, reject) => {
      this.#server.bindAsync(address, tls ?? grpc.ServerCredentials.createInsecure(), (e, bound) =>
        e ? reject(bindError('xDS/CA', target, e)) : resolve(bound),
      );
    });
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.#server.tryShutdown(() => resolve());
      // Open ADS streams never end on their own; cut them so shutdown completes.
      setTimeout(() => this.#server.forceShutdown(), 100).unref();
    });
  }

  #memo(source: object, encode: () => CachedResource): CachedResource {
    let r = this.#encoded.get(source);
    if (r === undefined) {
      r = encode();
      this.#encoded.set(source, r);
    }
    return r;
  }

  #pushType(typeUrl: string): void {
    for (const s of this.#sessions) s.push(typeUrl);
  }

  /**
   * A stream without a valid node token is refused UNAUTHENTICATED. Its first request (if
   * it comes within REFUSAL_WAIT_MS) names the proxy, so proxy-status can list it as refused.
   */
  #refuseToken(call: AdsStream, reason = 'missing or invalid node token'): void {
    let done = false;
    const refuse = (claimedId: string | undefined, claimedNode: string | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      log.warn({ peer: call.getPeer(), proxy: claimedId }, 'xds stream without a valid node token');
      this.proxies.refused(claimedId ?? call.getPeer(), claimedNode ?? '', reason);
      call.emit('error', { code: grpc.status.UNAUTHENTICATED, details: reason });
    };
    const timer = setTimeout(() => refuse(undefined, undefined), REFUSAL_WAIT_MS);
    call.once('data', (req: DeltaRequest) =>
      refuse(req.node?.id || undefined, structString(req.node?.metadata, 'NODE_NAME')),
    );
    call.on('error', () => refuse(undefined, undefined));
  }

  #onStream(call: AdsStream): void {
    const header = call.metadata.get('authorization')[0];
    const node = this.#tokens.nodeFromAuthorization(header);
    if (node !== undefined) this.#serve(call, node);
    else if (this.authenticator === undefined) this.#refuseToken(call);
    // Requests wait in the stream's buffer until a 'data' listener is attached.
    else
      void authenticateNode(this.#tokens, this.authenticator, header)
        .catch((e: Error) => ({ ok: false as const, reason: `authentication failed: ${e.message}` }))
        .then((auth) => {
          if (auth.ok) this.#serve(call, auth.node, auth.identity);
          else this.#refuseToken(call, auth.reason);
        });
  }

  /** `identity`: a workload acting for itself (a waypoint's own token), which reads only its waypoint config. */
  #serve(call: AdsStream, node: string, identity?: string): void {
    call.sendMetadata(new grpc.Metadata());
    let session: AdsSession | undefined;
    let refused = false;
    const fail = (code: grpc.status, details: string, claimedId?: string) => {
      refused = true;
      log.warn({ node, details }, 'xds stream refused');
      this.proxies.refused(claimedId ?? call.getPeer(), node, details);
      call.emit('error', { code, details });
    };
    call.on('data', (req) => {
      if (refused) return;
      if (session === undefined) {
        const id = req.node?.id;
        if (!id) return fail(grpc.status.INVALID_ARGUMENT, 'the first request must carry the node');
        const claimed = structString(req.node?.metadata, 'NODE_NAME');
        if (claimed !== undefined && claimed !== node) {
          return fail(grpc.status.PERMISSION_DENIED, `token is for node ${node}, not ${claimed}`, id);
        }
        const record = this.proxies.record(id, node);
        record.connected = true;
        record.admin = adminAddress(structString(req.node?.metadata, 'ADMIN_ADDRESS'));
        session = new AdsSession(
          call,
          record,
          this.cache,
          this.proxies,
          () => this.#primed,
          (typeUrl, name) =>
            identity === undefined
              ? typeUrl !== WAYPOINT_CONFIG_TYPE_URL || this.#waypointNodes.get(name)?.has(node) === true
              : typeUrl === WAYPOINT_CONFIG_TYPE_URL &&
                this.#waypointNodes.get(name)?.has(node) === true &&
                this.#waypointIdentities.get(name) === identity,
        );
        this.#sessions.add(session);
        log.info({ proxy: id, node }, 'proxy connected');
      }
      session.onRequest(req, SERVED_TYPES);
    });
    const closed = () => {
      if (session === undefined || !this.#sessions.delete(session)) return;
      const record = session.record;
      // A proxy may reconnect before its old stream is noticed gone; it stays connected then.
      record.connected = [...this.#sessions].some((s) => s.record === record);
      session.record.lastContact = Date.now();
      log.info({ proxy: session.record.proxyId }, 'proxy disconnected');
    };
    call.on('end', () => {
      closed();
      call.end();
    });
    call.on('error', closed);
    call.on('close', closed);
    call.on('cancelled', closed);
  }

  #addCaService(opts: XdsServerOptions): void {
    const handler = createCertificateHandler({
      tokens: opts.tokens,
      authenticator: () => this.authenticator,
      ...(opts.onCsrRefused ? { onRefused: opts.onCsrRefused } : {}),
      signCsr: opts.signCsr!,
      workloadsOnNode: (node) => this.#workloadsByNode.get(node) ?? [],
      ...(opts.maxCertTtlSeconds === undefined ? {} : { maxTtlSeconds: opts.maxCertTtlSeconds }),
    });
    this.#server.addService(
      {
        CreateCertificate: {
          path: CA_METHOD,
          requestStream: false,
          responseStream: false,
          requestSerialize: certificateRequestCodec.serialize,
          requestDeserialize: certificateRequestCodec.deserialize,
          responseSerialize: certificateResponseCodec.serialize,
          responseDeserialize: certificateResponseCodec.deserialize,
        },
      },
      { CreateCertificate: handler },
    );
  }
}

function cached(name: string, payloadType: string, bytes: Uint8Array, rank: number): CachedResource {
  return { name, payloadType, bytes, rank, version: contentVersion(bytes) };
}

/** `unix:/absolute/path` (grpc-js's Unix-domain address form). */
function isUnixAddress(host: string): boolean {
  return /^unix:\//.test(host);
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * A proxy's announced admin endpoint, kept only as `IP:port` (`[v6]:port`): the CLI dials
 * what proxy-status reports, so a name or anything else a proxy claims is dropped.
 */
function adminAddress(claimed: string | undefined): string | undefined {
  if (claimed === undefined) return undefined;
  const m = /^(?:(\d{1,3}(?:\.\d{1,3}){3})|\[([0-9a-fA-F:.]+)\]):(\d{1,5})$/.exec(claimed);
  const ip = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (ip === undefined || isIP(ip) === 0 || port < 1 || port > 65535) return undefined;
  return claimed;
}
