import {
  accessLogger,
  type Logger,
  logger,
  type MeshMetrics,
  type ParsedIp,
  type Service,
  serviceKey,
  ZmeshError,
} from '@zmesh/shared';
import type { JwtAuthenticator, RequestAuth } from '../authz/jwt-authenticator.js';
import { authorize } from '../authz/l7-authorizer.js';
import type { ConfigView, Destination, Endpoint } from '../config/config-view.js';
import { endpointOf } from '../config/config-view.js';
import type { RequestMirror, RouteFilters, RouteMatch, RouteRule } from '../config/waypoint-config.js';
import { type ForwardPlan, forward } from '../forward/forwarder.js';
import type { MirrorTarget } from '../forward/mirror.js';
import type { UpstreamSet } from '../forward/upstream-set.js';
import type { BackendCluster } from '../resilience/backend-cluster.js';
import type { Clock } from '../resilience/clock.js';
import { incomingBudgetMs } from '../resilience/deadline.js';
import { planFault } from '../resilience/fault-injector.js';
import type { TokenBucket } from '../resilience/rate-limiter.js';
import { headerModifiers, modifyPath, redirectLocation, withPath } from '../route/route-filters.js';
import { NO_QUERY, pickWeighted, queryReader } from '../route/route-table.js';
import type { WaypointMetrics } from '../telemetry/waypoint-metrics.js';
import { type Exchange, replyError, writeHead } from './http-exchange.js';
import { remoteAddress } from './remote-address.js';
import { type RequestRecord, recordRequest } from './request-record.js';
import type { PathNormalization } from './request-target.js';

const log = logger('waypoint');
/** One line per request, written in batches (see accessLogger). */
const accessLog = accessLogger('waypoint');

/** What every request on one tunnel shares: who sent it and where the tunnel was for. */
export interface TunnelContext {
  /** The source workload's SPIFFE ID (the HBONE peer: ztunnel presents the source's certificate). */
  peerIdentity: string;
  authority: { host: string; port: number };
  /**
   * The source workload's name as the source ztunnel's `baggage` gives it, for metric
   * labels when this waypoint's config does not hold the source (it holds the workloads
   * behind its services). Only kept when its namespace is the peer identity's.
   */
  sourceWorkload?: string;
  forwardedFor?: string;
  /** The tunnel's source address (the source pod's), parsed once per tunnel, for source.ip and ipBlocks. */
  sourceIp?: ParsedIp;
  /** The CONNECT authority's address, for destination.ip. */
  destinationIp?: ParsedIp;
  traceparent?: string;
  upstream: UpstreamSet;
}

export interface HandlerDeps {
  view: () => ConfigView;
  cluster: (key: string, service: Service | undefined, view: ConfigView) => BackendCluster;
  bucket: (ruleId: string, rule: RouteRule) => TokenBucket | undefined;
  metrics: WaypointMetrics;
  /** Shared TCP metrics (istio_tcp_*), for tunnels that are not HTTP. */
  mesh: MeshMetrics;
  clock: Clock;
  random: () => number;
  /** `namespace/name` of this waypoint, for x-zmesh-retry-owner. */
  self: string;
  /** One line per request; default the waypoint's batched access log. */
  accessLog?: Logger;
  /** How request paths are normalized before policy and routes read them (default BASE). */
  pathNormalization?: PathNormalization;
  /** Istio's numTrustedProxies: X-Forwarded-For hops believed for remote.ip (default 0). */
  numTrustedProxies?: number;
  /** Verifies JWTs for RequestAuthentications; keeps fetched key sets across configs. */
  authn: JwtAuthenticator;
}

/** The L7 pipeline: destination, authorization, route, rate limit, fault, deadline, forward. */
export async function handleRequest(deps: HandlerDeps, tunnel: TunnelContext, ex: Exchange): Promise<void> {
  const started = deps.clock.now();
  const view = deps.view();
  const record: RequestRecord = { ex, tunnel, started, view, flag: '-', attempts: 0 };
  if (tunnel.forwardedFor !== undefined) ex.clientAddress = tunnel.forwardedFor.replace(/^\[|\]$/g, '');
  try {
    await pipeline(deps, tunnel, ex, view, record);
  } catch (e) {
    const error =
      e instanceof ZmeshError
        ? e
        : new ZmeshError('ZM_ERR_INTERNAL_FAULT', { reason: (e as Error).message }, { cause: e });
    record.flag = error.flag;
    try {
      replyError(ex, error, record.replyHeaders);
    } catch (replyFailure) {
      // The client is gone (an HTTP/2 stream reset, say): nothing to answer, only to count.
      log.debug({ err: (replyFailure as Error).message }, 'local reply not sent');
      ex.res.destroy();
    }
  }
  try {
    recordRequest(deps.metrics, deps.clock, deps.accessLog ?? accessLog, record);
  } catch (e) {
    log.warn({ err: (e as Error).message }, 'request not recorded');
  }
}

async function pipeline(
  deps: HandlerDeps,
  tunnel: TunnelContext,
  ex: Exchange,
  view: ConfigView,
  record: RequestRecord,
): Promise<void> {
  const { host, port } = tunnel.authority;
  const dest = view.destination(host, port);
  if (!dest) throw new ZmeshError('ZM_ERR_ROUTE_NO_DESTINATION', { address: `${host}:${port}` });
  record.destination = dest;
  // No RequestAuthentication: nothing to await on the common path.
  const auth =
    view.config.requestAuthentications.length === 0
      ? undefined
      : await authenticate(deps, view, ex, dest, record);
  authorizeRequest(deps, view, tunnel, ex, dest, record, auth);
  const target = chooseTarget(deps, view, dest, ex, record);
  const rule = record.rule;
  if (rule?.rateLimit) takeToken(deps, rule, record);
  const fault = planFault(rule?.fault, deps.random);
  if (fault.delayMs > 0) await deps.clock.sleep(fault.delayMs);
  if (fault.abortStatus !== undefined) {
    // The status is the route's choice, so this local reply is not replyError's catalogue status.
    const error = new ZmeshError('ZM_ERR_WAYPOINT_FAULT', { route: record.routeId });
    record.flag = error.flag;
    const body = `${error.code}: ${error.message}`;
    writeHead(ex.res, fault.abortStatus, {
      'content-type': 'text/plain',
      'content-length': String(Buffer.byteLength(body)),
      'x-zmesh-error': error.code,
    });
    ex.res.end(body);
    return;
  }
  if (rule?.filters?.redirect) {
    redirect(ex, rule.filters.redirect, tunnel.authority.port, target.match);
    return;
  }
  if (rule) applyRouteFilters(ex, rule.filters, target);
  const deadlineAt = deadlineOf(ex, rule, record.started);
  if (deadlineAt !== undefined && deadlineAt <= deps.clock.now())
    throw new ZmeshError('ZM_ERR_WAYPOINT_DEADLINE', {
      budgetMs: deadlineAt - record.started,
      stage: 'the upstream call',
    });
  const plan: ForwardPlan = {
    cluster: target.cluster,
    endpoints: target.endpoints,
    serviceName: target.serviceName,
    rule,
    deadlineAt,
    self: deps.self,
  };
  const responseMods = rule && headerModifiers('responseHeaders', rule.filters, target.backendFilters);
  if (responseMods) plan.responseHeaders = responseMods;
  const mirrors = rule?.filters?.mirrors;
  if (mirrors) plan.mirrors = mirrorTargets(deps, view, mirrors, tunnel.authority.port);
  await forward(deps, tunnel, ex, plan, record);
}

/**
 * RequestAuthentication: a token that fails is 401 with Envoy's `www-authenticate`; none
 * passes unauthenticated (a policy may still require a principal). A verified token is
 * stripped before the app unless forwardOriginalToken, and its payload or claims copied
 * to headers as asked. Headers of those names the client sent are never forwarded.
 */
async function authenticate(
  deps: HandlerDeps,
  view: ConfigView,
  ex: Exchange,
  dest: Destination,
  record: RequestRecord,
): Promise<RequestAuth | undefined> {
  const service = dest.service;
  const rules = view.jwtRules(service ? `${service.namespace}/${service.name}` : undefined);
  if (rules.length === 0) return undefined;
  const q = ex.target.indexOf('?');
  const outcome = await deps.authn.authenticate(rules, {
    header: ex.header,
    query: q === -1 ? '' : ex.target.slice(q + 1),
  });
  const outputs = view.jwtOutputHeaders(rules);
  if (outcome.kind === 'invalid') {
    deps.metrics.jwt.inc({ result: 'invalid' });
    record.replyHeaders = {
      ...record.replyHeaders,
      'www-authenticate': `Bearer realm="http://${quotable(ex.authority)}${quotable(ex.path.slice(0, 256))}", error="invalid_token"`,
    };
    record.jwtError = outcome.reason;
    throw new ZmeshError('ZM_ERR_JWT_INVALID', { reason: outcome.reason });
  }
  deps.metrics.jwt.inc({ result: outcome.kind === 'valid' ? 'valid' : 'missing' });
  const edits = outcome.kind === 'valid' ? outcome.edits : undefined;
  ex.headerEdits = {
    remove: [...outputs, ...(edits?.remove ?? [])],
    set: edits?.set ?? {},
  };
  if (edits && edits.removeParams.length > 0) ex.target = withoutParams(ex.target, edits.removeParams);
  if (outcome.kind !== 'valid') return undefined;
  record.requestPrincipal = outcome.auth.principal;
  return outcome.auth;
}

/**
 * The target without the named query parameters (the token was read from one). The other
 * parameters stay byte for byte as the client sent them.
 */
function withoutParams(target: string, names: readonly string[]): string {
  const q = target.indexOf('?');
  const kept = target
    .slice(q + 1)
    .split('&')
    .filter((pair) => {
      const name = pair.split('=', 1)[0]!;
      let decoded = name;
      try {
        decoded = decodeURIComponent(name.replace(/\+/g, ' '));
      } catch {}
      return !names.includes(decoded);
    });
  return kept.length === 0 ? target.slice(0, q) : `${target.slice(0, q)}?${kept.join('&')}`;
}

/** Text safe inside a quoted-string of a header (RFC 9110 §5.6.4): printable, no `"` or `\`. */
function quotable(text: string): string {
  return text.replace(/[^\x21-\x7e]|["\\]/g, '');
}

/** L7 policy on the tunnel's peer identity (the source workload) and this request. */
function authorizeRequest(
  deps: HandlerDeps,
  view: ConfigView,
  tunnel: TunnelContext,
  ex: Exchange,
  dest: Destination,
  record: RequestRecord,
  auth: RequestAuth | undefined,
): void {
  const service = dest.service;
  const decision = authorize(
    view.policies,
    {
      principal: tunnel.peerIdentity,
      port: tunnel.authority.port,
      ...(service ? { service: `${service.namespace}/${service.name}` } : {}),
      ...(tunnel.sourceIp ? { sourceIp: tunnel.sourceIp } : {}),
      ...(deps.numTrustedProxies ? remoteIpOf(ex, deps.numTrustedProxies, tunnel.sourceIp) : {}),
      ...(tunnel.destinationIp ? { destinationIp: tunnel.destinationIp } : {}),
      http: {
        method: ex.method,
        path: ex.path,
        host: ex.authority,
        header: ex.header,
        ...(auth ? { auth } : {}),
      },
    },
    'http',
  );
  if (decision.audit) record.audit = decision.audit;
  if (!decision.allowed) throw new ZmeshError('ZM_ERR_WAYPOINT_DENIED', { policy: decision.policy });
}

/** remote.ip past the trusted hops; none known (no source, nothing believed): it matches no block. */
function remoteIpOf(ex: Exchange, hops: number, source: ParsedIp | undefined): { remoteIp?: ParsedIp } {
  const remoteIp = remoteAddress(ex.header('x-forwarded-for'), hops, source);
  return remoteIp ? { remoteIp } : {};
}

/** The route rule's local rate limit; its x-ratelimit-* headers go on every response. */
function takeToken(deps: HandlerDeps, rule: RouteRule, record: RequestRecord): void {
  const bucket = deps.bucket(record.routeId ?? '', rule);
  if (!bucket) return;
  const d = bucket.take();
  record.replyHeaders = {
    'x-ratelimit-limit': String(d.limit),
    'x-ratelimit-remaining': String(d.remaining),
    'x-ratelimit-reset': String(Math.ceil(d.resetMs / 1000)),
  };
  if (!d.allowed) throw new ZmeshError('ZM_ERR_WAYPOINT_RATE_LIMITED', { route: record.routeId });
}

type Target = Pick<ForwardPlan, 'cluster' | 'endpoints' | 'serviceName'> & {
  /** The route match that chose the rule (ReplacePrefixMatch reads its prefix). */
  match?: RouteMatch;
  /** The chosen backendRef's own filters. */
  backendFilters?: RouteFilters;
};

/**
 * The RequestMirror backends this request goes to: each by its percent. A mirror naming no
 * service is skipped (apply refuses it; config given directly may still name one).
 */
function mirrorTargets(
  deps: HandlerDeps,
  view: ConfigView,
  mirrors: readonly RequestMirror[],
  port: number,
): MirrorTarget[] {
  const out: MirrorTarget[] = [];
  for (const m of mirrors) {
    if (m.percent < 100 && deps.random() * 100 >= m.percent) continue;
    const svc = view.serviceByName(m.backend.namespace, m.backend.name);
    if (!svc) continue;
    const key = serviceKey(svc);
    out.push({
      cluster: deps.cluster(key, svc, view),
      endpoints: view.endpoints(svc, m.backend.port ?? port),
      serviceName: key,
    });
  }
  return out;
}

/** What a rule with no matches matches (Gateway API): every path. */
const CATCH_ALL: RouteMatch = { path: { type: 'PathPrefix', value: '/' }, headers: [] };

/** A RequestRedirect answers here; nothing goes upstream (Gateway API HTTPRequestRedirectFilter). */
function redirect(
  ex: Exchange,
  filter: NonNullable<RouteFilters['redirect']>,
  port: number,
  match: RouteMatch | undefined,
): void {
  const location = redirectLocation(
    filter,
    { authority: ex.authority, path: ex.path, target: ex.target, port },
    match ?? CATCH_ALL,
  );
  writeHead(ex.res, filter.statusCode, { location, 'content-length': '0' });
  ex.res.end();
}

/**
 * URLRewrite (path and host) and the request header modifiers, on the exchange so that both
 * forwarders (plain and upgrade) send what the route says. Policy has already read the
 * request as the client sent it.
 */
function applyRouteFilters(ex: Exchange, filters: RouteFilters | undefined, target: Target): void {
  const rewrite = filters?.rewrite;
  if (rewrite?.path)
    ex.target = withPath(ex.target, modifyPath(ex.path, rewrite.path, target.match ?? CATCH_ALL));
  if (rewrite?.hostname) ex.authority = rewrite.hostname;
  const mods = headerModifiers('requestHeaders', filters, target.backendFilters);
  if (mods) ex.routeHeaders = mods;
}

/** The backend service (by route, weighted) and its endpoints, or the one pod the tunnel named. */
function chooseTarget(
  deps: HandlerDeps,
  view: ConfigView,
  dest: Destination,
  ex: Exchange,
  record: RequestRecord,
): Target {
  if (dest.kind === 'workload') {
    const key = dest.service ? serviceKey(dest.service) : `workload/${dest.workload.uid}`;
    const endpoints: Endpoint[] =
      dest.workload.status === 'HEALTHY' ? [endpointOf(dest.workload, dest.port)] : [];
    record.backend = dest.service;
    return { cluster: deps.cluster(key, dest.service, view), endpoints, serviceName: key };
  }
  const { backend, port, match, backendFilters } = routeBackend(deps, view, dest, ex, record);
  record.backend = backend;
  const target: Target = {
    cluster: deps.cluster(serviceKey(backend), backend, view),
    endpoints: view.endpoints(backend, port),
    serviceName: serviceKey(backend),
  };
  if (match) target.match = match;
  if (backendFilters) target.backendFilters = backendFilters;
  return target;
}

/** Route match (404 if routes exist and none matches), then a backendRef by weight. */
function routeBackend(
  deps: HandlerDeps,
  view: ConfigView,
  dest: Extract<Destination, { kind: 'service' }>,
  ex: Exchange,
  record: RequestRecord,
): { backend: Service; port: number; match?: RouteMatch; backendFilters?: RouteFilters } {
  const port = dest.port.servicePort;
  const table = view.routes(dest.service, port);
  if (!table) return { backend: dest.service, port };
  const matched = table.match({
    method: ex.method,
    path: ex.path,
    host: ex.authority,
    header: ex.header,
    query: table.readsQuery ? queryReader(ex.target) : NO_QUERY,
  });
  // Gateway API: a request that matches no rule of the attached routes gets 404.
  if (!matched)
    throw new ZmeshError('ZM_ERR_WAYPOINT_NO_ROUTE', {
      service: serviceKey(dest.service),
      path: ex.path.slice(0, 256),
    });
  record.rule = matched.rule;
  record.routeId = matched.id;
  const refs = matched.rule.backendRefs;
  if (refs.length === 0) return { backend: dest.service, port, match: matched.match };
  const i = pickWeighted(
    refs.map((b) => b.weight),
    deps.random,
  );
  const ref = i >= 0 ? refs[i] : undefined;
  // Gateway API: 500 for the traffic a weight-0-only rule or an unresolved backendRef would take.
  if (!ref)
    throw new ZmeshError('ZM_ERR_WAYPOINT_NO_BACKEND', {
      route: matched.id,
      reason: 'every backendRef has weight 0',
    });
  const svc = view.serviceByName(ref.namespace, ref.name);
  if (!svc)
    throw new ZmeshError('ZM_ERR_WAYPOINT_NO_BACKEND', {
      route: matched.id,
      reason: `BackendNotFound: no service ${ref.namespace}/${ref.name}`,
    });
  return {
    backend: svc,
    port: ref.port ?? port,
    match: matched.match,
    ...(ref.filters ? { backendFilters: ref.filters } : {}),
  };
}

function deadlineOf(ex: Exchange, rule: RouteRule | undefined, started: number): number | undefined {
  const budget = incomingBudgetMs(ex.header);
  const routeMs = rule?.timeouts?.requestMs;
  const candidates = [budget, routeMs && routeMs > 0 ? routeMs : undefined].filter(
    (x): x is number => x !== undefined,
  );
  if (candidates.length === 0) return undefined;
  return started + Math.min(...candidates);
}
