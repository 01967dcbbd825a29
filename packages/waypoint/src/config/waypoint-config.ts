import type { L7Policy, RequestAuthn, Service, Workload } from '@zmesh/shared';

export type {
  ConditionAttr,
  JwtLocation,
  JwtRule,
  L7Action,
  L7Policy,
  PolicyCondition,
  PolicyOperation,
  PolicyRule,
  PolicySource,
  RequestAuthn,
} from '@zmesh/shared';

/**
 * What a waypoint consumes: the services it serves and their endpoints (the shared
 * workload model), Gateway API HTTPRoutes whose parentRefs name those services, L7
 * AuthorizationPolicies targeting this waypoint, and per-backend traffic policy. The
 * local YAML file and (later) xDS both produce this object; the waypoint swaps it whole.
 */
export interface WaypointConfig {
  /** The waypoint's own name and namespace (its Gateway); policies target it by these. */
  name: string;
  namespace: string;
  trustDomain: string;
  serviceAccount: string;
  services: Service[];
  workloads: Workload[];
  routes: HttpRoute[];
  /** GRPCRoutes, read into the same route model (`grpc-route-parser.ts`); one table with `routes`. */
  grpcRoutes: HttpRoute[];
  policies: L7Policy[];
  /** Istio RequestAuthentications targeting this waypoint or its services (JWT). */
  requestAuthentications: RequestAuthn[];
  backendPolicies: BackendPolicy[];
}

export type PathMatchType = 'Exact' | 'PathPrefix' | 'RegularExpression';

export interface ValueMatch {
  type: 'Exact' | 'RegularExpression';
  name: string;
  value: string;
}

export interface RouteMatch {
  path?: { type: PathMatchType; value: string };
  /** Header names lower case. */
  headers: ValueMatch[];
  /** Query parameter names as written (Gateway API: case-sensitive); only the first of a name counts. */
  queryParams?: ValueMatch[];
  method?: string;
}

export interface BackendRef {
  /** A Service name; `namespace` defaults to the route's. */
  name: string;
  namespace: string;
  port?: number;
  weight: number;
  /** Gateway API allows header modifiers per backendRef; they run after the rule's. */
  filters?: RouteFilters;
}

/** Gateway API HTTPHeaderFilter, names lower case: set overwrites, add appends, remove drops. */
export interface HeaderModifier {
  set: Array<[name: string, value: string]>;
  add: Array<[name: string, value: string]>;
  remove: string[];
}

/** Gateway API HTTPPathModifier. */
export type PathModifier =
  | { type: 'ReplaceFullPath'; value: string }
  | { type: 'ReplacePrefixMatch'; value: string };

export type RedirectStatus = 301 | 302 | 303 | 307 | 308;

export interface RequestRedirect {
  scheme?: 'http' | 'https';
  hostname?: string;
  port?: number;
  path?: PathModifier;
  statusCode: RedirectStatus;
}

export interface UrlRewrite {
  hostname?: string;
  path?: PathModifier;
}

export interface RequestMirror {
  backend: Omit<BackendRef, 'weight' | 'filters'>;
  /** 0–100, fractions allowed (Gateway API `percent` or `fraction`). */
  percent: number;
}

/**
 * A rule's (or backendRef's) Gateway API filters, folded by type: each type appears at most
 * once (RequestMirror many times), so the order they were written in does not change the result.
 */
export interface RouteFilters {
  requestHeaders?: HeaderModifier;
  responseHeaders?: HeaderModifier;
  redirect?: RequestRedirect;
  rewrite?: UrlRewrite;
  mirrors?: RequestMirror[];
}

export interface RetryPolicy {
  /** Retries after the first attempt (Istio's `attempts`). */
  attempts: number;
  retryOn: RetryOn[];
  perTryTimeoutMs?: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** POST/PATCH and other non-idempotent methods are retried only when this is set. */
  retryNonIdempotent: boolean;
}

export type RetryOn = '5xx' | 'gateway-error' | 'reset' | 'connect-failure';

export interface RateLimitPolicy {
  maxTokens: number;
  tokensPerFill: number;
  fillIntervalMs: number;
}

export interface FaultPolicy {
  delay?: { percent: number; fixedDelayMs: number };
  abort?: { percent: number; httpStatus: number };
}

export interface RouteRule {
  /** Empty: matches every request (Gateway API: a PathPrefix "/" match). */
  matches: RouteMatch[];
  backendRefs: BackendRef[];
  filters?: RouteFilters;
  /** Gateway API HTTPRouteTimeouts: the whole request, and each attempt at a backend. */
  timeouts?: { requestMs?: number; backendRequestMs?: number };
  retry?: RetryPolicy;
  rateLimit?: RateLimitPolicy;
  fault?: FaultPolicy;
}

export interface HttpRoute {
  name: string;
  namespace: string;
  /** Services (GAMMA: parentRef kind Service) this route attaches to. */
  parentRefs: Array<{ name: string; namespace: string; port?: number }>;
  hostnames: string[];
  rules: RouteRule[];
  /** metadata.creationTimestamp (ms since the epoch), when the control plane gave it: ties go to the oldest. */
  createdAt?: number;
}

export interface CircuitBreakerPolicy {
  maxConnections: number;
  maxPendingRequests: number;
  maxRequests: number;
}

export interface OutlierPolicy {
  consecutive5xx: number;
  intervalMs: number;
  baseEjectionMs: number;
  maxEjectionMs: number;
  maxEjectionPercent: number;
}

/** Like an Istio DestinationRule trafficPolicy, for one service (`namespace/hostname`). */
export interface BackendPolicy {
  service: string;
  loadBalancer: 'ROUND_ROBIN' | 'LEAST_REQUEST';
  circuitBreaker: CircuitBreakerPolicy;
  outlier: OutlierPolicy;
}

/** Envoy's cluster circuit-breaker defaults. */
export const DEFAULT_CIRCUIT_BREAKER: CircuitBreakerPolicy = {
  maxConnections: 1024,
  maxPendingRequests: 1024,
  maxRequests: 1024,
};

/** Envoy's outlier-detection defaults (consecutive_5xx, interval, base ejection, max ejection). */
export const DEFAULT_OUTLIER: OutlierPolicy = {
  consecutive5xx: 5,
  intervalMs: 10_000,
  baseEjectionMs: 30_000,
  maxEjectionMs: 300_000,
  maxEjectionPercent: 10,
};

export const DEFAULT_RETRY: RetryPolicy = {
  attempts: 2,
  retryOn: ['connect-failure', 'reset', '5xx'],
  backoffBaseMs: 25,
  backoffMaxMs: 250,
  retryNonIdempotent: false,
};

export function defaultBackendPolicy(service: string): BackendPolicy {
  return {
    service,
    loadBalancer: 'ROUND_ROBIN',
    circuitBreaker: { ...DEFAULT_CIRCUIT_BREAKER },
    outlier: { ...DEFAULT_OUTLIER },
  };
}
