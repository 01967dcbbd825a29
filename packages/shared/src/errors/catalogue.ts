export type ResponseFlag = (typeof RESPONSE_FLAGS)[number];

/**
 * Outcomes collapse to this small set for metric labels (Envoy's response flags where
 * one fits): bounded, unlike messages.
 */
export const RESPONSE_FLAGS = [
  '-', // success
  'UF', // upstream connection failure
  'UH', // no healthy upstream
  'NR', // no route / unknown destination
  'UAEX', // denied by authorization
  'DC', // downstream protocol error or disconnect
  'UT', // timeout
  'UO', // overflow: quota, breaker, retry budget
  'RL', // local rate limit
  'FI', // fault injection abort
  'URX', // retries exhausted, the last attempt failed
  'TLS', // handshake or certificate failure
  'CFG', // configuration missing or invalid
  'INT', // internal error
] as const;

export interface CatalogueEntry {
  /** Message template; `{name}` is filled from the error's context. */
  readonly message: string;
  /** HTTP status when the error ends a CONNECT or an HTTP request. */
  readonly status: number;
  readonly flag: ResponseFlag;
}

/**
 * Every stable error code. Codes are `ZM_ERR_<AREA>_<PROBLEM>`; docs/errors.md lists the
 * same set (errors.test.ts keeps them in step). Never renumber or reuse a code.
 */
export const CATALOGUE = {
  ZM_ERR_SPIFFE_INVALID: { message: 'invalid SPIFFE ID {id}: {reason}', status: 400, flag: 'TLS' },
  ZM_ERR_CERT_INVALID: { message: 'certificate rejected: {reason}', status: 401, flag: 'TLS' },
  ZM_ERR_CERT_EXPIRED: {
    message: 'certificate for {identity} expired at {notAfter}',
    status: 503,
    flag: 'TLS',
  },
  ZM_ERR_CERT_KEYS_DIR_UNSAFE: {
    message: 'refusing to keep keys in {dir}: {reason}',
    status: 500,
    flag: 'CFG',
  },
  ZM_ERR_CERT_MISSING: { message: 'no certificate for {identity}', status: 503, flag: 'TLS' },
  ZM_ERR_CA_REFUSED: { message: 'CA refused {identity}: {reason}', status: 403, flag: 'TLS' },
  ZM_ERR_CA_UNAVAILABLE: { message: 'CA unreachable for {identity}: {reason}', status: 503, flag: 'TLS' },
  ZM_ERR_TLS_PEER_IDENTITY: {
    message: 'peer identity {actual} is not one of the expected identities {expected}',
    status: 503,
    flag: 'TLS',
  },
  ZM_ERR_TLS_PEER_TRUST_DOMAIN: {
    message: 'peer {actual} is outside trust domain {trustDomain}',
    status: 401,
    flag: 'TLS',
  },
  ZM_ERR_HBONE_BAD_METHOD: { message: 'method {method} is not CONNECT', status: 400, flag: 'DC' },
  ZM_ERR_HBONE_BAD_AUTHORITY: {
    message: 'malformed :authority {authority}: {reason}',
    status: 400,
    flag: 'DC',
  },
  ZM_ERR_HBONE_UNKNOWN_DESTINATION: {
    message: 'no workload behind this listener has address {authority}',
    status: 400,
    flag: 'NR',
  },
  ZM_ERR_HBONE_UPSTREAM_CONNECT: { message: 'connect to {target} failed: {reason}', status: 503, flag: 'UF' },
  ZM_ERR_HBONE_NOT_SERVING: { message: 'workload {workload} is not serving', status: 503, flag: 'UH' },
  ZM_ERR_HBONE_TUNNEL_REFUSED: {
    message: 'tunnel to {authority} refused with status {status}',
    status: 503,
    flag: 'UF',
  },
  ZM_ERR_HBONE_SESSION: { message: 'HBONE session to {address} failed: {reason}', status: 503, flag: 'UF' },
  ZM_ERR_HBONE_FORWARDED_IGNORED: {
    message: 'forwarded header from {peer}, which is not the destination waypoint, ignored',
    status: 200,
    flag: '-',
  },
  ZM_ERR_HBONE_RAPID_RESET: {
    message: 'peer reset {count} streams prematurely within {within} (limit {limit})',
    status: 400,
    flag: 'DC',
  },
  ZM_ERR_HBONE_PROTOCOL: {
    message: 'HTTP/2 {h2Error} from {side}: {reason}',
    status: 400,
    flag: 'DC',
  },
  ZM_ERR_HBONE_HANDSHAKE_TIMEOUT: {
    message:
      'connection from {source} did not finish TLS and the HTTP/2 preface within {timeoutMs} ms ({stage})',
    status: 408,
    flag: 'UT',
  },
  ZM_ERR_HBONE_PREAUTH_LIMIT: {
    message:
      'connection from {source} refused: {pending} unauthenticated connections ({scope} limit {limit})',
    status: 503,
    flag: 'UO',
  },
  ZM_ERR_HBONE_FLOOD: {
    message: 'peer flooded HTTP/2 {kind}: {count} over the limit of {limit}',
    status: 400,
    flag: 'DC',
  },
  ZM_ERR_FD_RESERVE: {
    message:
      'connection from {source} refused: {open} of {limit} file descriptors open, {reserve} kept in reserve',
    status: 503,
    flag: 'UO',
  },
  ZM_ERR_ACCEPT_FD_EXHAUSTED: {
    message: 'listener {listener} could not accept ({errno}): not accepting for {delayMs} ms',
    status: 503,
    flag: 'UO',
  },
  ZM_ERR_TASK_FAILED: { message: 'periodic task {task} failed: {reason}', status: 500, flag: 'INT' },
  ZM_ERR_AUTHZ_DENIED: { message: 'denied by policy {policy}', status: 401, flag: 'UAEX' },
  ZM_ERR_AUTHZ_STALE: {
    message: 'policies for {workload} are {ageSeconds} s stale, over {maxSeconds} s: new connections refused',
    status: 401,
    flag: 'UAEX',
  },
  ZM_ERR_AUTHZ_WAYPOINT_REQUIRED: {
    message: 'tunnels to {workload} must come from its waypoint {waypoint}, not {peer}',
    status: 401,
    flag: 'UAEX',
  },
  ZM_ERR_CONFIG_INVALID: { message: 'invalid config {source}: {reason}', status: 500, flag: 'CFG' },
  ZM_ERR_STATE_STORE: {
    message: 'state store {dir} cannot be used: {reason}',
    status: 500,
    flag: 'CFG',
  },
  ZM_ERR_CONFIG_PENDING: { message: '{resource} waits for {missing}', status: 503, flag: 'CFG' },
  ZM_ERR_ADMIN_UNAUTHORIZED: {
    message: 'admin request refused: {reason}',
    status: 401,
    flag: 'CFG',
  },
  ZM_ERR_ADMIN_TOKEN_FILE: {
    message: 'admin token file {file}: {reason}',
    status: 500,
    flag: 'CFG',
  },
  ZM_ERR_ADMIN_UNREACHABLE: {
    message: 'control-plane admin endpoint {admin} unreachable: {reason}',
    status: 503,
    flag: 'CFG',
  },
  ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE: {
    message: 'ztunnel admin endpoint {admin} unreachable: {reason}',
    status: 503,
    flag: 'CFG',
  },
  ZM_ERR_XDS_BIND_REFUSED: {
    message:
      'refusing to serve {service} on {host}: plaintext binds loopback only; serve TLS there (--serving-dns)',
    status: 500,
    flag: 'CFG',
  },
  ZM_ERR_XDS_TLS_REFUSED: {
    message: 'control plane {address} refused: its TLS could not be verified ({reason})',
    status: 503,
    flag: 'TLS',
  },
  ZM_ERR_LISTEN_BIND: {
    message: '{listener} listener cannot bind {address}: {errno} ({reason})',
    status: 500,
    flag: 'CFG',
  },
  ZM_ERR_ROUTE_NO_DESTINATION: { message: 'no workload or service at {address}', status: 503, flag: 'NR' },
  ZM_ERR_ROUTE_NO_HEALTHY: { message: 'service {service} has no healthy endpoint', status: 503, flag: 'UH' },
  ZM_ERR_TENANT_QUOTA: { message: 'tenant {tenant} over {quota} quota ({limit})', status: 503, flag: 'UO' },
  ZM_ERR_TENANT_QUEUE_FULL: {
    message: 'tenant {tenant} has {limit} items queued for {scheduler}',
    status: 503,
    flag: 'UO',
  },
  ZM_ERR_TENANT_MEMORY_PRESSURE: {
    message: 'node buffers at {used} of {limit} bytes: tenant {tenant} is shed first',
    status: 503,
    flag: 'UO',
  },
  ZM_ERR_CAPTURE_UNAVAILABLE: { message: 'capture unavailable: {reason}', status: 500, flag: 'INT' },
  ZM_ERR_CAPTURE_ATTACH: { message: 'capture for pod {pod} failed: {reason}', status: 500, flag: 'INT' },
  ZM_ERR_CAPTURE_NO_ORIGINAL_DST: {
    message: 'no original destination for {key}',
    status: 503,
    flag: 'NR',
  },
  ZM_ERR_CAPTURE_NETNS: { message: 'network namespace {netns}: {reason}', status: 500, flag: 'INT' },
  ZM_ERR_AGENT_BAD_REQUEST: { message: 'node-agent request rejected: {reason}', status: 400, flag: 'DC' },
  ZM_ERR_AGENT_UNKNOWN_WORKLOAD: { message: 'workload {uid} is not enrolled', status: 404, flag: 'NR' },
  ZM_ERR_ZDS_TRANSPORT: { message: 'ZDS connection dropped: {reason}', status: 400, flag: 'DC' },
  ZM_ERR_ZDS_WORKLOAD: { message: 'ZDS workload {uid} refused: {reason}', status: 400, flag: 'CFG' },
  ZM_ERR_CNI_REFUSED: { message: 'CNI ADD for pod {pod} refused: {reason}', status: 400, flag: 'CFG' },
  ZM_ERR_CLUSTER_SPEC: { message: 'invalid cluster spec: {reason}', status: 400, flag: 'CFG' },
  ZM_ERR_CLUSTER_SETUP: { message: 'cluster {step} failed: {reason}', status: 500, flag: 'INT' },
  ZM_ERR_INSTALL_INPUT: { message: 'invalid install input {source}: {reason}', status: 400, flag: 'CFG' },
  ZM_ERR_INSTALL_CRDS_MISSING: { message: 'missing CRDs: {missing}', status: 412, flag: 'CFG' },
  ZM_ERR_WAYPOINT_BAD_REQUEST: { message: 'malformed HTTP request: {reason}', status: 400, flag: 'DC' },
  ZM_ERR_JWT_INVALID: { message: 'Jwt rejected: {reason}', status: 401, flag: 'UAEX' },
  ZM_ERR_WAYPOINT_DENIED: { message: 'RBAC: access denied by {policy}', status: 403, flag: 'UAEX' },
  ZM_ERR_WAYPOINT_OVERFLOW: { message: '{what} at its limit {limit}', status: 503, flag: 'UO' },
  ZM_ERR_WAYPOINT_RATE_LIMITED: { message: 'route {route} over its rate limit', status: 429, flag: 'RL' },
  ZM_ERR_WAYPOINT_DEADLINE: {
    message: 'deadline of {budgetMs} ms expired before {stage}',
    status: 504,
    flag: 'UT',
  },
  ZM_ERR_WAYPOINT_FAULT: { message: 'fault injected by route {route}', status: 500, flag: 'FI' },
  ZM_ERR_WAYPOINT_NO_ROUTE: { message: 'no route rule of {service} matches {path}', status: 404, flag: 'NR' },
  ZM_ERR_WAYPOINT_NO_BACKEND: {
    message: 'route {route} has no backend for this request: {reason}',
    status: 500,
    flag: 'NR',
  },
  ZM_ERR_WAYPOINT_UPSTREAM: { message: 'upstream {endpoint} failed: {reason}', status: 503, flag: 'UF' },
  ZM_ERR_INTERNAL_FAULT: { message: 'internal error: {reason}', status: 500, flag: 'INT' },
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorCode = keyof typeof CATALOGUE;
