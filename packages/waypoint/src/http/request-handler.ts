import {
  accessLogger,
  type Logger,
  logger,
  type MeshMetrics,
  type Service,
  serviceKey,
  ZmeshError,
} from '@zmesh/shared';
import { authorize } from '../authz/l7-authorizer.js';
import type { ConfigView, Destination, Endpoint } from '../config/config-view.js';
import { endpointOf } from '../config/config-view.js';
import type { RouteRule } from '../config/waypoint-config.js';
import { type ForwardPlan, forward } from '../forward/forwarder.js';
import type { UpstreamSet } from '../forward/upstream-set.js';
import type { BackendCluster } from '../resilience/backend-cluster.js';
import type { Clock } from '../resilience/clock.js';
import { incomingBudgetMs } from '../resilience/deadline.js';
import { planFault } from '../resilience/fault-injector.js';
import type { TokenBucket } from '../resilience/rate-limiter.js';
import { pickWeighted } from '../route/route-table.js';
import type { WaypointMetrics } from '../telemetry/waypoint-metrics.js';
import { type Exchange, replyError, writeHead } from './http-exchange.js';
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
}

/** The L7 pipeline: destination, authorization, route, rate limit, fault, deadline, forward. */
export async function handleRequest(deps: HandlerDeps, tunnel: TunnelContext, ex: Exchange): Promise<void> {
  const started = deps.clock.now();
  const view = deps.view();
  const record: RequestRecord = { ex, tunnel, started, view, flag: '-', attempts: 0 };
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
  authorizeRequest(view, tunnel, ex, dest);
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
  const deadlineAt = deadlineOf(ex, rule, record.started);
  if (deadlineAt !== undefined && deadlineAt <= deps.clock.now())
    throw new ZmeshError('ZM_ERR_WAYPOINT_DEADLINE', {
      budgetMs: deadlineAt - record.started,
      stage: 'the upstream call',
    });
  const plan: ForwardPlan = { ...target, rule, deadlineAt, self: deps.self };
  await forward(deps, tunnel, ex, plan, record);
}

/** L7 policy on the tunnel's peer identity (the source workload) and this request. */
function authorizeRequest(view: ConfigView, tunnel: TunnelContext, ex: Exchange, dest: Destination): void {
  const service = dest.service;
  const decision = authorize(
    view.policies,
    {
      principal: tunnel.peerIdentity,
      port: tunnel.authority.port,
      ...(service ? { service: `${service.namespace}/${service.name}` } : {}),
      http: { method: ex.method, path: ex.path, host: ex.authority, header: ex.header },
    },
    'http',
  );
  if (!decision.allowed) throw new ZmeshError('ZM_ERR_WAYPOINT_DENIED', { policy: decision.policy });
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

type Target = Pick<ForwardPlan, 'cluster' | 'endpoints' | 'serviceName'>;

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
  const { backend, port } = routeBackend(deps, view, dest, ex, record);
  record.backend = backend;
  return {
    cluster: deps.cluster(serviceKey(backend), backend, view),
    endpoints: view.endpoints(backend, port),
    serviceName: serviceKey(backend),
  };
}

/** Route match (404 if routes exist and none matches), then a backendRef by weight. */
function routeBackend(
  deps: HandlerDeps,
  view: ConfigView,
  dest: Extract<Destination, { kind: 'service' }>,
  ex: Exchange,
  record: RequestRecord,
): { backend: Service; port: number } {
  const table = view.routes(dest.service);
  const port = dest.port.servicePort;
  if (!table) return { backend: dest.service, port };
  const matched = table.match({ method: ex.method, path: ex.path, host: ex.authority, header: ex.header });
  // Gateway API: a request that matches no rule of the attached routes gets 404.
  if (!matched)
    throw new ZmeshError('ZM_ERR_WAYPOINT_NO_ROUTE', {
      service: serviceKey(dest.service),
      path: ex.path.slice(0, 256),
    });
  record.rule = matched.rule;
  record.routeId = matched.id;
  const refs = matched.rule.backendRefs;
  if (refs.length === 0) return { backend: dest.service, port };
  const i = pickWeighted(
    refs.map((b) => b.weight),
    deps.random,
  );
  const ref = i >= 0 ? refs[i] : undefined;
  const svc = ref ? view.serviceByName(ref.namespace, ref.name) : undefined;
  if (!ref || !svc)
    throw new ZmeshError('ZM_ERR_ROUTE_NO_DESTINATION', {
      address: ref ? `${ref.namespace}/${ref.name}` : matched.id,
    });
  return { backend: svc, port: ref.port ?? port };
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
