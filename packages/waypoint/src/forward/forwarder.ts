import type { Writable } from 'node:stream';
import { childTraceparent, spiffeIdOf, ZmeshError } from '@zmesh/shared';
import type { Endpoint } from '../config/config-view.js';
import type { RetryPolicy, RouteRule } from '../config/waypoint-config.js';
import { type Exchange, forwardableHeaders, responseHeaders, writeHead } from '../http/http-exchange.js';
import type { HandlerDeps, TunnelContext } from '../http/request-handler.js';
import type { RequestRecord } from '../http/request-record.js';
import type { BackendCluster } from '../resilience/backend-cluster.js';
import { DEADLINE_HEADER, grpcTimeoutValue } from '../resilience/deadline.js';
import { backoffMs, isIdempotent } from '../resilience/retry-budget.js';
import { Cancel } from './cancel.js';
import { RequestBody } from './request-body.js';
import { forwardUpgrade } from './upgrade-forwarder.js';
import { AttemptError, type AttemptResponse, attempt } from './upstream-attempt.js';

const RETRY_OWNER_HEADER = 'x-zmesh-retry-owner';

export interface ForwardPlan {
  cluster: BackendCluster;
  endpoints: readonly Endpoint[];
  serviceName: string;
  rule?: RouteRule;
  deadlineAt?: number;
  self: string;
  /** Cancelled when the client goes away before its response is finished. */
  downstream?: Cancel;
}

type Outcome = { response: AttemptResponse; endpoint: Endpoint } | { error: ZmeshError };

/**
 * Sends the request upstream with the route's retry policy: retries only idempotent
 * methods (unless the route says otherwise), only while the body can be replayed, only
 * under the backend's retry budget, and never when an outer hop already owns retries
 * (x-zmesh-retry-owner on the request), so that retries do not multiply across hops.
 */
export async function forward(
  deps: HandlerDeps,
  tunnel: TunnelContext,
  ex: Exchange,
  plan: ForwardPlan,
  record: RequestRecord,
): Promise<void> {
  if (ex.upgrade) return forwardUpgrade(deps, ex, ex.upgrade, plan, record);
  const body = new RequestBody(ex.req);
  // The client went away (reset, disconnect, malformed body): stop the attempt in flight.
  const gone = new Cancel();
  ex.res.once('close', () => {
    if (!ex.res.writableFinished) gone.cancel();
  });
  plan.downstream = gone;
  let requestBytes = 0;
  ex.req.on('data', (c: Buffer) => {
    requestBytes += c.length;
  });
  const policy = plan.rule?.retry;
  const mayRetry =
    policy !== undefined &&
    policy.attempts > 0 &&
    (policy.retryNonIdempotent || isIdempotent(ex.method)) &&
    ex.header(RETRY_OWNER_HEADER) === undefined;
  const budget = plan.cluster.retryBudget;
  budget.requestStarted();
  let outcome: Outcome;
  try {
    outcome = await attempts(deps, tunnel, ex, plan, record, body, mayRetry ? policy : undefined);
  } finally {
    budget.requestEnded();
  }
  record.requestBytes = requestBytes;
  if ('error' in outcome) throw outcome.error;
  commit(ex, outcome.response, record, mayRetry ? plan.self : undefined);
}

async function attempts(
  deps: HandlerDeps,
  tunnel: TunnelContext,
  ex: Exchange,
  plan: ForwardPlan,
  record: RequestRecord,
  body: RequestBody,
  policy: RetryPolicy | undefined,
): Promise<Outcome> {
  const traceparent = childTraceparent(ex.header('traceparent'), tunnel.traceparent);
  let exclude: string | undefined;
  let slots = 0;
  try {
    for (let i = 0; ; i++) {
      const single = await oneAttempt(deps, ex, plan, record, body, traceparent, exclude);
      record.attempts++;
      const next = await afterAttempt(deps, plan, record, body, policy, single, i);
      if (next === 'done') return single;
      slots++;
      exclude = 'response' in single ? single.endpoint.key : record.endpoint;
    }
  } finally {
    for (let i = 0; i < slots; i++) plan.cluster.retryBudget.release();
  }
}

/**
 * Decides whether attempt `i` is retried; if so takes a budget slot and sleeps the backoff.
 * A request keeps its slots until its last attempt has answered (stricter than Envoy, which
 * frees a slot when the retried attempt ends): with every host failing, a request retrying
 * twice still counts, which keeps total attempts within (1 + percent) × requests + minConcurrency
 * for a burst of concurrent requests.
 */
async function afterAttempt(
  deps: HandlerDeps,
  plan: ForwardPlan,
  record: RequestRecord,
  body: RequestBody,
  policy: RetryPolicy | undefined,
  single: Outcome,
  i: number,
): Promise<'done' | 'retry'> {
  const metrics = deps.metrics;
  const failure = failureOf(single);
  metrics.attempts.inc({ destination_service: plan.serviceName, outcome: failure ?? 'ok' });
  if (
    !failure ||
    !policy ||
    plan.downstream?.cancelled ||
    i >= policy.attempts ||
    !retriable(failure, policy) ||
    !body.replayable
  ) {
    if (failure && i > 0) record.flag = 'URX';
    return 'done';
  }
  const wait = backoffMs(i, policy.backoffBaseMs, policy.backoffMaxMs, deps.random);
  if (plan.deadlineAt !== undefined && deps.clock.now() + wait >= plan.deadlineAt) return 'done';
  if (!plan.cluster.retryBudget.tryAcquire()) {
    metrics.retries.inc({ destination_service: plan.serviceName, result: 'budget_exhausted' });
    return 'done';
  }
  metrics.retries.inc({ destination_service: plan.serviceName, result: 'attempted' });
  if ('response' in single) single.response.abort();
  await deps.clock.sleep(wait);
  return 'retry';
}

type Failure = '5xx' | 'gateway-error' | 'reset' | 'connect-failure' | 'timeout' | 'local';

function failureOf(o: Outcome): Failure | undefined {
  if ('response' in o)
    return o.response.status >= 500
      ? [502, 503, 504].includes(o.response.status)
        ? 'gateway-error'
        : '5xx'
      : undefined;
  const kind = o.error.cause instanceof AttemptError ? o.error.cause.kind : undefined;
  return kind === undefined || kind === 'overflow' ? 'local' : kind;
}

function retriable(f: Failure, policy: RetryPolicy): boolean {
  const on = policy.retryOn;
  if (f === 'local') return false;
  if (f === 'gateway-error') return on.includes('gateway-error') || on.includes('5xx');
  // A per-try timeout is retried as Envoy does when 5xx or reset is on (it is a gateway error).
  if (f === 'timeout') return on.includes('5xx') || on.includes('reset') || on.includes('gateway-error');
  return on.includes(f);
}

async function oneAttempt(
  deps: HandlerDeps,
  ex: Exchange,
  plan: ForwardPlan,
  record: RequestRecord,
  body: RequestBody,
  traceparent: string,
  exclude: string | undefined,
): Promise<Outcome> {
  const admitted = admit(plan, exclude);
  if ('error' in admitted) return admitted;
  const { endpoint, release } = admitted;
  record.endpoint = endpoint.key;
  const w = endpoint.workload;
  record.endpointWorkload = { name: w.workloadName, namespace: w.namespace, principal: spiffeIdOf(w) };
  const cancel = new Cancel();
  plan.downstream?.onCancel(() => cancel.cancel());
  const remaining = plan.deadlineAt === undefined ? undefined : plan.deadlineAt - deps.clock.now();
  const limit = Math.min(remaining ?? Infinity, plan.rule?.retry?.perTryTimeoutMs ?? Infinity);
  const timer = Number.isFinite(limit) ? setTimeout(() => cancel.cancel(), Math.max(0, limit)) : undefined;
  plan.cluster.hostStarted(endpoint.key);
  try {
    const response = await attempt(record.tunnel.upstream, endpoint, {
      protocol: ex.protocol,
      method: ex.method,
      path: ex.target,
      authority: ex.authority,
      headers: upstreamHeaders(ex, plan, traceparent, remaining),
      body,
      cancel,
      cluster: plan.cluster,
    });
    plan.cluster.outlier.record(endpoint.key, response.status >= 500, plan.endpoints.length);
    response.body.once('end', () => clearTimeout(timer));
    response.body.once('close', () => {
      clearTimeout(timer);
      plan.cluster.hostEnded(endpoint.key);
      release();
    });
    return { response, endpoint };
  } catch (e) {
    clearTimeout(timer);
    release();
    plan.cluster.hostEnded(endpoint.key);
    const local = e instanceof AttemptError && e.kind === 'overflow';
    if (!local) plan.cluster.outlier.record(endpoint.key, true, plan.endpoints.length);
    return { error: upstreamError(endpoint, e) };
  }
}

/** max_requests, then a host from the load balancer (never the one a retry just failed on, if others exist). */
export function admit(
  plan: ForwardPlan,
  exclude: string | undefined,
): { endpoint: Endpoint; release: () => void } | { error: ZmeshError } {
  const admission = plan.cluster.admitRequest();
  if (!admission.ok)
    return {
      error: new ZmeshError('ZM_ERR_WAYPOINT_OVERFLOW', {
        what: `${plan.serviceName} ${admission.reason}`,
        limit: plan.cluster.policy.circuitBreaker.maxRequests,
      }),
    };
  const endpoint = plan.cluster.pick(plan.endpoints, exclude);
  if (!endpoint) {
    admission.release();
    return { error: new ZmeshError('ZM_ERR_ROUTE_NO_HEALTHY', { service: plan.serviceName }) };
  }
  return { endpoint, release: admission.release };
}

/** End-to-end headers plus this hop's trace span, the shrunk deadline and the retry owner. */
function upstreamHeaders(
  ex: Exchange,
  plan: ForwardPlan,
  traceparent: string,
  remaining: number | undefined,
): Record<string, string | string[]> {
  const headers = forwardableHeaders(ex);
  headers.traceparent = traceparent;
  if (remaining !== undefined) {
    headers[DEADLINE_HEADER] = String(Math.max(0, Math.floor(remaining)));
    if (headers['grpc-timeout'] !== undefined) headers['grpc-timeout'] = grpcTimeoutValue(remaining);
  }
  if (plan.rule?.retry) headers[RETRY_OWNER_HEADER] = plan.self;
  return headers;
}

export function upstreamError(endpoint: Endpoint, e: unknown): ZmeshError {
  const kind = e instanceof AttemptError ? e.kind : 'reset';
  if (kind === 'overflow') {
    const cause = (e as AttemptError).cause;
    return cause instanceof ZmeshError
      ? cause
      : new ZmeshError('ZM_ERR_WAYPOINT_OVERFLOW', { what: (e as Error).message, limit: '?' }, { cause: e });
  }
  const reason = `${kind}: ${(e as Error).message}`;
  if (kind === 'timeout')
    return new ZmeshError(
      'ZM_ERR_WAYPOINT_DEADLINE',
      { budgetMs: '?', stage: `a response from ${endpoint.key}` },
      { cause: e },
    );
  return new ZmeshError('ZM_ERR_WAYPOINT_UPSTREAM', { endpoint: endpoint.key, reason }, { cause: e });
}

function commit(
  ex: Exchange,
  response: AttemptResponse,
  record: RequestRecord,
  retryOwner: string | undefined,
): void {
  const headers = { ...responseHeaders(response.headers), ...record.replyHeaders };
  if (retryOwner) headers[RETRY_OWNER_HEADER] = retryOwner;
  writeHead(ex.res, response.status, headers);
  const sink = ex.res as unknown as Writable;
  let bytes = 0;
  response.body.on('data', (c: Buffer) => {
    bytes += c.length;
    if (!sink.write(c)) {
      response.body.pause();
      sink.once('drain', () => response.body.resume());
    }
  });
  response.body.once('end', () => {
    record.responseBytes = bytes;
    const trailers = response.trailers();
    if (trailers) ex.res.addTrailers(trailers);
    const grpc = trailers?.['grpc-status'] ?? response.headers['grpc-status'];
    if (typeof grpc === 'string') record.grpcStatus = grpc;
    ex.res.end();
  });
  response.body.once('error', () => ex.res.destroy());
  ex.res.once('close', () => {
    if (!response.body.readableEnded) response.abort();
  });
}
