import { type Logger, parseSpiffeId, type ResponseFlag, type Service } from '@zmesh/shared';
import type { ConfigView, Destination } from '../config/config-view.js';
import type { RouteRule } from '../config/waypoint-config.js';
import type { Clock } from '../resilience/clock.js';
import type { WaypointMetrics } from '../telemetry/waypoint-metrics.js';
import { type Exchange, isGrpc } from './http-exchange.js';
import type { TunnelContext } from './request-handler.js';

/** What one request did, filled in as it goes; becomes one metric sample and one log line. */
export interface RequestRecord {
  ex: Exchange;
  tunnel: TunnelContext;
  started: number;
  view: ConfigView;
  flag: ResponseFlag;
  attempts: number;
  destination?: Destination;
  backend?: Service;
  rule?: RouteRule;
  routeId?: string;
  endpoint?: string;
  endpointWorkload?: { name: string; namespace: string; principal: string };
  replyHeaders?: Record<string, string>;
  requestBytes?: number;
  responseBytes?: number;
  /** From the response trailers (gRPC puts its status there) or headers. */
  grpcStatus?: string;
  /** The AUDIT policy that matched: the access log line names it. */
  audit?: string;
  /** `iss/sub` of the verified JWT. */
  requestPrincipal?: string;
  /** Why the request's JWT was refused (401). */
  jwtError?: string;
}

export function recordRequest(metrics: WaypointMetrics, clock: Clock, log: Logger, r: RecordLike): void {
  const finish = () => {
    const ms = clock.now() - r.started;
    const status = r.ex.res.statusCode;
    const source = r.view.workloadByIdentity(r.tunnel.peerIdentity);
    const grpc = isGrpc(r.ex);
    const labels = {
      reporter: 'waypoint',
      source_workload: source?.workloadName ?? r.tunnel.sourceWorkload ?? 'unknown',
      source_workload_namespace:
        source?.namespace ?? /\/ns\/([^/]+)\//.exec(r.tunnel.peerIdentity)?.[1] ?? 'unknown',
      source_principal: r.tunnel.peerIdentity,
      destination_workload: r.endpointWorkload?.name ?? 'unknown',
      destination_workload_namespace: r.endpointWorkload?.namespace ?? 'unknown',
      destination_principal: r.endpointWorkload?.principal ?? 'unknown',
      destination_service: r.backend?.hostname ?? 'unknown',
      destination_service_name: r.backend?.name ?? 'unknown',
      destination_service_namespace: r.backend?.namespace ?? 'unknown',
      request_protocol: grpc ? 'grpc' : 'http',
      response_code: String(status),
      grpc_response_status: grpc ? (r.grpcStatus ?? String(r.ex.res.getHeader('grpc-status') ?? '')) : '',
      response_flags: r.flag,
    };
    metrics.requests.inc(labels);
    metrics.duration.observe(labels, ms);
    metrics.requestBytes.observe(labels, r.requestBytes ?? 0);
    metrics.responseBytes.observe(labels, r.responseBytes ?? 0);
    log.info(
      {
        src: r.tunnel.peerIdentity,
        for: r.tunnel.forwardedFor,
        method: r.ex.method,
        authority: r.ex.authority,
        path: r.ex.path.slice(0, 256),
        proto: r.ex.protocol,
        status,
        flags: r.flag,
        route: r.routeId,
        upstream: r.endpoint,
        attempts: r.attempts,
        ms,
        ...(r.requestPrincipal ? { req_principal: r.requestPrincipal } : {}),
        ...(r.audit ? { audit: r.audit } : {}),
        ...(r.jwtError ? { jwt_error: r.jwtError } : {}),
      },
      'request',
    );
  };
  if (r.ex.res.writableFinished) finish();
  else r.ex.res.once('close', finish);
}

type RecordLike = RequestRecord;

/**
 * The workload name in a tunnel's `baggage` (`k8s.workload.name`), if its
 * `k8s.namespace.name` is the namespace of the peer's SPIFFE ID: a source ztunnel speaks
 * for its own workloads only, so a name claimed for another namespace is not used.
 */
export function baggageWorkload(
  peerIdentity: string,
  baggage: Record<string, string> | undefined,
): string | undefined {
  const name = baggage?.['k8s.workload.name'];
  if (!name) return undefined;
  const id = parseSpiffeId(peerIdentity);
  return id.ok && id.value.namespace !== undefined && id.value.namespace === baggage['k8s.namespace.name']
    ? name
    : undefined;
}
