import type { Duplex } from 'node:stream';
import {
  type Credential,
  canonicalIp,
  HboneServer,
  type Logger,
  logger,
  MeshMetrics,
  type ParsedIp,
  parseIp,
  type Result,
  registerAcceptPauses,
  registerTaskFailures,
  type Service,
  type TrustBundle,
  type TunnelRequest,
  ZmeshError,
} from '@zmesh/shared';
import { type JwksOptions, JwtAuthenticator } from './authz/jwt-authenticator.js';
import { authorize } from './authz/l7-authorizer.js';
import { decodeWaypointConfig } from './config/config-parser.js';
import { ConfigView } from './config/config-view.js';
import { defaultBackendPolicy, type RouteRule, type WaypointConfig } from './config/waypoint-config.js';
import { forwardOpaque } from './forward/opaque-forwarder.js';
import { TunnelPool } from './forward/tunnel-pool.js';
import { UpstreamSet } from './forward/upstream-set.js';
import { duplexPair } from './http/duplex-pair.js';
import { HttpFrontend } from './http/http-frontend.js';
import { detectProtocol } from './http/protocol-detector.js';
import type { HandlerDeps, TunnelContext } from './http/request-handler.js';
import { baggageWorkload } from './http/request-record.js';
import type { PathNormalization } from './http/request-target.js';
import { BackendCluster } from './resilience/backend-cluster.js';
import { type Clock, systemClock } from './resilience/clock.js';
import { TokenBucket } from './resilience/rate-limiter.js';
import { WaypointMetrics } from './telemetry/waypoint-metrics.js';

const log = logger('waypoint');

export const WAYPOINT_HBONE_PORT = 15008;

export interface WaypointOptions {
  /** The waypoint's own SVID: it serves 15008 with it and tunnels to endpoints with it. */
  credential: Credential;
  bundle: TrustBundle;
  config: WaypointConfig;
  host: string;
  port?: number;
  /** HBONE port of endpoint ztunnels. */
  endpointHbonePort?: number;
  metrics?: MeshMetrics;
  clock?: Clock;
  random?: () => number;
  detectTimeoutMs?: number;
  /** Where each request's line goes; default the batched access log (the warm-up's is silent). */
  accessLog?: Logger;
  /** Istio's pathNormalization for every request (http/request-target.ts); default BASE. */
  pathNormalization?: PathNormalization;
  /**
   * Istio's `gatewayTopology.numTrustedProxies`: how many X-Forwarded-For hops remote.ip
   * believes (http/remote-address.ts); default 0, remote.ip is the source.
   */
  numTrustedProxies?: number;
  /** How keys fetched from a RequestAuthentication's jwksUri are cached and refreshed. */
  jwks?: JwksOptions;
}

/**
 * The per-namespace L7 proxy (docs/design.md §3 "Through a waypoint"): terminates HBONE from source
 * ztunnels, serves HTTP/1.1 and HTTP/2 on each tunnel (opaque TCP gets L4 rules only), and
 * forwards each request over HBONE, with its own identity, to the chosen endpoint's ztunnel.
 */
export class Waypoint {
  readonly metrics: MeshMetrics;
  readonly waypointMetrics: WaypointMetrics;
  readonly #opts: WaypointOptions;
  readonly #server: HboneServer;
  readonly #tunnels: TunnelPool;
  readonly #frontend: HttpFrontend;
  readonly #clusters = new Map<string, BackendCluster>();
  readonly #buckets = new Map<string, TokenBucket>();
  readonly #upstreams = new Set<UpstreamSet>();
  readonly #clock: Clock;
  readonly #deps: HandlerDeps;
  readonly #authn: JwtAuthenticator;
  #view: ConfigView;
  #credential: Credential;
  #draining = false;

  constructor(opts: WaypointOptions) {
    this.#opts = opts;
    this.#credential = opts.credential;
    this.#clock = opts.clock ?? systemClock;
    this.metrics = opts.metrics ?? new MeshMetrics();
    registerTaskFailures(this.metrics.registry);
    registerAcceptPauses(this.metrics.registry);
    this.waypointMetrics = new WaypointMetrics(this.metrics.registry);
    this.#view = new ConfigView(opts.config);
    // A jwksUri naming a service is fetched from that service's address in the active config.
    this.#authn = new JwtAuthenticator(
      (host) => this.#view.config.services.find((s) => s.hostname === host)?.addresses[0]?.address,
      opts.jwks,
    );
    this.#tunnels = new TunnelPool({ credential: () => this.#credential, bundle: opts.bundle });
    this.#deps = this.#handlerDeps();
    this.#frontend = new HttpFrontend(this.#deps, this.waypointMetrics);
    this.#server = new HboneServer({
      credential: opts.credential,
      bundle: opts.bundle,
      metrics: this.metrics,
      name: `waypoint ${opts.config.namespace}/${opts.config.name}`,
      onTunnel: (req) => this.#onTunnel(req),
    });
  }

  start(): Promise<{ host: string; port: number }> {
    return this.#server.listen({ host: this.#opts.host, port: this.#opts.port ?? WAYPOINT_HBONE_PORT });
  }

  /** Swaps the whole config in one assignment; requests already routed keep the view they began with. */
  setConfig(config: WaypointConfig): void {
    this.#view = new ConfigView(config);
    this.#buckets.clear();
    this.#authn.retain(config.requestAuthentications);
    // Backends that left the config take their breaker, budget and outlier state with them.
    const keep = this.#view.backendKeys();
    for (const key of this.#clusters.keys()) if (!keep.has(key)) this.#clusters.delete(key);
    this.waypointMetrics.configApplied.inc({ result: 'applied' });
    log.info(
      {
        services: config.services.length,
        routes: config.routes.length,
        grpcRoutes: config.grpcRoutes.length,
        policies: config.policies.length,
      },
      'config applied',
    );
    if (this.#view.unresolvedBackends.length > 0)
      log.warn(
        { backends: this.#view.unresolvedBackends.slice(0, 32), count: this.#view.unresolvedBackends.length },
        'route backends name no service (BackendNotFound): requests sent there are answered 500',
      );
  }

  /**
   * Decodes and applies an untyped config (an xDS payload or parsed file). Invalid input
   * changes nothing and returns every reason, for a NACK.
   */
  applyConfig(doc: unknown, source: string): Result<WaypointConfig> {
    const decoded = decodeWaypointConfig(doc, source);
    if (decoded.ok) this.setConfig(decoded.value);
    else {
      this.waypointMetrics.configApplied.inc({ result: 'rejected' });
      log.warn({ source, reasons: decoded.error }, 'config rejected; the active config stays');
    }
    return decoded;
  }

  get config(): WaypointConfig {
    return this.#view.config;
  }

  updateCredential(cred: Credential): void {
    this.#credential = cred;
    this.#server.updateCredential(cred);
  }

  /** Open downstream tunnels, HBONE sessions to endpoints and backends with state: for tests and /config_dump. */
  stats(): { downstreamTunnels: number; endpointSessions: number; backends: string[] } {
    return {
      downstreamTunnels: this.#upstreams.size,
      endpointSessions: this.#tunnels.sessionCount(),
      backends: [...this.#clusters.keys()],
    };
  }

  /** The resilience state of one backend service (`namespace/hostname`), for tests and debugging. */
  cluster(key: string): BackendCluster | undefined {
    return this.#clusters.get(key);
  }

  /**
   * Graceful: GOAWAY to every source ztunnel so new tunnels go elsewhere (or fail closed),
   * and every downstream connection ends after its requests in flight (HttpFrontend.drain);
   * what is still open after `graceMs` is closed.
   */
  async drain(graceMs?: number): Promise<void> {
    this.#draining = true;
    this.#frontend.drain();
    await this.#server.drain(graceMs);
    await this.stop();
  }

  /** True from the start of a drain: readiness reports it, so no new traffic is sent here. */
  get draining(): boolean {
    return this.#draining;
  }

  async stop(): Promise<void> {
    await this.#server.close();
    for (const u of this.#upstreams) u.close();
    this.#tunnels.close();
    this.#frontend.close();
  }

  #handlerDeps(): HandlerDeps {
    const { config } = this.#opts;
    return {
      view: () => this.#view,
      cluster: (key, service, view) => this.#cluster(key, service, view),
      bucket: (id, rule) => this.#bucket(id, rule),
      metrics: this.waypointMetrics,
      mesh: this.metrics,
      clock: this.#clock,
      random: this.#opts.random ?? Math.random,
      self: `${config.namespace}/${config.name}`,
      authn: this.#authn,
      ...(this.#opts.accessLog ? { accessLog: this.#opts.accessLog } : {}),
      ...(this.#opts.pathNormalization ? { pathNormalization: this.#opts.pathNormalization } : {}),
      ...(this.#opts.numTrustedProxies ? { numTrustedProxies: this.#opts.numTrustedProxies } : {}),
    };
  }

  #cluster(key: string, service: Service | undefined, view: ConfigView): BackendCluster {
    const policy = service ? view.backendPolicy(service) : defaultBackendPolicy(key);
    let c = this.#clusters.get(key);
    if (!c) {
      c = new BackendCluster(policy, this.#clock, (host, ejected) => {
        if (ejected) this.waypointMetrics.ejections.inc({ destination_service: key });
        this.waypointMetrics.ejected.inc({ destination_service: key }, ejected ? 1 : -1);
        log.info({ service: key, host, ejected }, ejected ? 'outlier ejected' : 'outlier readmitted');
      });
      this.#clusters.set(key, c);
    } else if (c.policy !== policy) c.setPolicy(policy);
    return c;
  }

  #bucket(id: string, rule: RouteRule): TokenBucket | undefined {
    if (!rule.rateLimit) return undefined;
    let b = this.#buckets.get(id);
    if (!b) {
      b = new TokenBucket(rule.rateLimit, this.#clock);
      this.#buckets.set(id, b);
    }
    return b;
  }

  async #onTunnel(req: TunnelRequest): Promise<{ upstream: Duplex }> {
    const { host, port } = req.request.authority;
    const view = this.#view;
    const dest = view.destination(host, port);
    if (!dest) throw new ZmeshError('ZM_ERR_HBONE_UNKNOWN_DESTINATION', { authority: `${host}:${port}` });
    const svc = dest.service;
    const sourceIp = sourceIpOf(req);
    const destinationIp = parseIp(host);
    const ctx = {
      principal: req.peerIdentity,
      port,
      ...(svc ? { service: `${svc.namespace}/${svc.name}` } : {}),
      ...(sourceIp ? { sourceIp } : {}),
      // With proxies trusted, each request's X-Forwarded-For names remote.ip.
      ...(this.#opts.numTrustedProxies ? { remoteIp: 'per-request' as const } : {}),
      ...(destinationIp ? { destinationIp } : {}),
    };
    // Refuse at CONNECT only what every request would be refused; the rest is judged per request.
    const verdict = authorize(view.policies, ctx, 'tunnel');
    if (!verdict.allowed) throw new ZmeshError('ZM_ERR_AUTHZ_DENIED', { policy: verdict.policy });
    // The HTTP servers read an in-memory pair spliced to the tunnel, not the HTTP/2 stream
    // itself. Handing them the stream would save two copies per chunk, but on Node 20 a
    // reply with `connection: close` then went out with its first 16 bytes replaced by
    // freed memory (reproduced with plain node:http2 + node:http over TLS), and keep-alive
    // load through it failed: never give http.Server an Http2Stream.
    const [outer, inner] = duplexPair();
    // A port declared TCP skips sniffing (no wait for server-first protocols).
    const declaredTcp = dest.kind === 'service' && dest.port.appProtocol === 'TCP';
    this.#serveTunnel(inner, req, svc, declaredTcp).catch((e: unknown) => {
      log.warn({ src: req.peerIdentity, err: (e as Error).message }, 'tunnel failed');
      inner.destroy();
    });
    return { upstream: outer };
  }

  async #serveTunnel(
    inner: Duplex,
    req: TunnelRequest,
    svc: Service | undefined,
    declaredTcp: boolean,
  ): Promise<void> {
    inner.on('error', () => {});
    // Let the HBONE server answer 200 and splice first: a refusal below must reach a live splice.
    await new Promise((resolve) => setImmediate(resolve));
    // `forwarded: for=` is the tunnel's own source address (the client pod, kernel-given), never
    // a header the source sent: the destination ztunnel connects to the app from it.
    const forwardedFor = forwardedForOf(req);
    const upstream = new UpstreamSet({
      tunnels: this.#tunnels,
      hbonePort: this.#opts.endpointHbonePort ?? WAYPOINT_HBONE_PORT,
      tunnelHeaders: {
        ...(forwardedFor ? { forwardedFor } : {}),
        ...(req.request.baggage ? { baggage: req.request.baggage } : {}),
        ...(req.request.traceparent ? { traceparent: req.request.traceparent } : {}),
      },
    });
    this.#upstreams.add(upstream);
    inner.once('close', () => {
      upstream.close();
      this.#upstreams.delete(upstream);
    });
    const protocol = declaredTcp ? 'tcp' : await detectProtocol(inner, this.#opts.detectTimeoutMs);
    this.waypointMetrics.tunnels.inc({ protocol });
    const sourceWorkload = baggageWorkload(req.peerIdentity, req.request.baggage);
    const sourceIp = sourceIpOf(req);
    const destinationIp = parseIp(req.request.authority.host);
    const ctx: TunnelContext = {
      peerIdentity: req.peerIdentity,
      authority: req.request.authority,
      ...(sourceWorkload ? { sourceWorkload } : {}),
      ...(forwardedFor ? { forwardedFor } : {}),
      ...(sourceIp ? { sourceIp } : {}),
      ...(destinationIp ? { destinationIp } : {}),
      ...(req.request.traceparent ? { traceparent: req.request.traceparent } : {}),
      upstream,
    };
    if (protocol === 'tcp') {
      await forwardOpaque(
        this.#deps,
        this.#tunnels,
        this.#opts.endpointHbonePort ?? WAYPOINT_HBONE_PORT,
        ctx,
        inner,
        svc,
      );
      return;
    }
    this.#frontend.serve(protocol, inner, ctx);
  }
}

/** RFC 7239 §6: the tunnel's source address as a `for=` node (IPv6 in brackets). */
function forwardedForOf(req: TunnelRequest): string | undefined {
  const ip = canonicalIp(req.stream.session?.socket?.remoteAddress ?? '');
  if (ip === undefined) return undefined;
  return ip.includes(':') ? `[${ip}]` : ip;
}

/**
 * source.ip: the tunnel's own source address, as the kernel gave it (ztunnel connects from
 * the source pod's address), never a `forwarded` header a peer could write.
 */
function sourceIpOf(req: TunnelRequest): ParsedIp | undefined {
  const address = req.stream.session?.socket?.remoteAddress;
  return address === undefined ? undefined : parseIp(address);
}
