import type { FieldReader } from '@zmesh/shared';
import { BACKEND_FILTERS, HTTP_RULE_FILTERS, readFilters, readServiceRef } from './filter-parser.js';
import {
  type BackendRef,
  DEFAULT_RETRY,
  type FaultPolicy,
  type HttpRoute,
  type RateLimitPolicy,
  type RetryOn,
  type RetryPolicy,
  type RouteMatch,
  type RouteRule,
  type ValueMatch,
} from './waypoint-config.js';

/** A regex longer than this is refused: routes are matched on every request. */
const MAX_REGEX_LENGTH = 1024;
const RETRY_ON: readonly RetryOn[] = ['5xx', 'gateway-error', 'reset', 'connect-failure'];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** One rule of a route kind, read into the shared model (HTTPRoute's here, GRPCRoute's in grpc-route-parser). */
export type RuleReader = (r: FieldReader, value: unknown, path: string, ns: string) => RouteRule | undefined;

/** A route's shell (name, namespace, parentRefs, hostnames) with its rules read by `readRuleOf`. */
export function readRoute(
  r: FieldReader,
  value: unknown,
  path: string,
  defaultNs: string,
  readRuleOf: RuleReader = readRule,
): HttpRoute | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'creationTimestamp', 'parentRefs', 'hostnames', 'rules']);
  // metadata.creationTimestamp (RFC 3339): the oldest route wins a precedence tie (Gateway API).
  const created = r.string(o.creationTimestamp, `${path}.creationTimestamp`, { optional: true });
  const createdAt = created === undefined ? undefined : Date.parse(created);
  if (createdAt !== undefined && !Number.isFinite(createdAt))
    r.fail(`${path}.creationTimestamp`, 'must be an RFC 3339 time');
  const namespace = r.string(o.namespace, `${path}.namespace`, { optional: true }) ?? defaultNs;
  const parentRefs = r.array(o.parentRefs, `${path}.parentRefs`).flatMap((p, i) => {
    const q = r.object(p, `${path}.parentRefs[${i}]`);
    if (!q) return [];
    r.onlyKeys(q, `${path}.parentRefs[${i}]`, ['kind', 'group', 'name', 'namespace', 'port']);
    if (q.kind !== undefined && q.kind !== 'Service') r.fail(`${path}.parentRefs[${i}].kind`, 'only Service');
    const name = r.string(q.name, `${path}.parentRefs[${i}].name`);
    const port = q.port === undefined ? undefined : r.port(q.port, `${path}.parentRefs[${i}].port`);
    const ns = r.string(q.namespace, `${path}.parentRefs[${i}].namespace`, { optional: true }) ?? namespace;
    return name ? [{ name, namespace: ns, ...(port ? { port } : {}) }] : [];
  });
  if (parentRefs.length === 0) r.fail(`${path}.parentRefs`, 'needs at least one Service');
  const rules = r
    .array(o.rules, `${path}.rules`)
    .flatMap((x, i) => readRuleOf(r, x, `${path}.rules[${i}]`, namespace) ?? []);
  return {
    name: r.string(o.name, `${path}.name`) ?? '',
    namespace,
    parentRefs,
    hostnames: (r.strings(o.hostnames, `${path}.hostnames`) ?? []).map((h) => h.toLowerCase()),
    rules,
    ...(createdAt !== undefined && Number.isFinite(createdAt) ? { createdAt } : {}),
  };
}

function readRule(r: FieldReader, value: unknown, path: string, ns: string): RouteRule | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, [
    'name',
    'matches',
    'filters',
    'backendRefs',
    'timeouts',
    'retry',
    'rateLimit',
    'fault',
  ]);
  const matches = r
    .array(o.matches, `${path}.matches`)
    .flatMap((m, i) => readMatch(r, m, `${path}.matches[${i}]`) ?? []);
  const rule: RouteRule = {
    matches,
    backendRefs: r
      .array(o.backendRefs, `${path}.backendRefs`)
      .flatMap((b, i) => readBackend(r, b, `${path}.backendRefs[${i}]`, ns, matches) ?? []),
  };
  const filters = readFilters(r, o.filters, `${path}.filters`, {
    allowed: HTTP_RULE_FILTERS,
    matches,
    namespace: ns,
  });
  if (filters) rule.filters = filters;
  // CEL on HTTPRouteRule: a redirect answers locally, so it has no backend to send to.
  if (filters?.redirect && rule.backendRefs.length > 0)
    r.fail(`${path}.filters`, 'RequestRedirect filter must not be used together with backendRefs');
  const timeouts = r.optionalObject(o.timeouts, `${path}.timeouts`);
  if (timeouts) rule.timeouts = readTimeouts(r, timeouts, `${path}.timeouts`);
  if (o.retry !== undefined) rule.retry = readRetry(r, o.retry, `${path}.retry`);
  if (o.rateLimit !== undefined) rule.rateLimit = readRateLimit(r, o.rateLimit, `${path}.rateLimit`);
  if (o.fault !== undefined) rule.fault = readFault(r, o.fault, `${path}.fault`);
  return rule;
}

/**
 * Gateway API HTTPRouteTimeouts: `0s` turns a timeout off; backendRequest may not be longer
 * than request (CEL on the type), since each attempt runs inside the request.
 */
function readTimeouts(
  r: FieldReader,
  o: Record<string, unknown>,
  path: string,
): { requestMs?: number; backendRequestMs?: number } {
  r.onlyKeys(o, path, ['request', 'backendRequest']);
  const requestMs = r.duration(o.request, `${path}.request`);
  const backendRequestMs = r.duration(o.backendRequest, `${path}.backendRequest`);
  if (
    requestMs !== undefined &&
    backendRequestMs !== undefined &&
    requestMs > 0 &&
    (backendRequestMs === 0 || backendRequestMs > requestMs)
  )
    r.fail(`${path}.backendRequest`, 'backendRequest timeout cannot be longer than request timeout');
  return {
    ...(requestMs !== undefined ? { requestMs } : {}),
    ...(backendRequestMs !== undefined ? { backendRequestMs } : {}),
  };
}

function readMatch(r: FieldReader, value: unknown, path: string): RouteMatch | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['path', 'headers', 'queryParams', 'method']);
  const match: RouteMatch = { headers: [] };
  const p = r.optionalObject(o.path, `${path}.path`);
  if (p) {
    const type = r.oneOf(
      p.type,
      `${path}.path.type`,
      ['Exact', 'PathPrefix', 'RegularExpression'] as const,
      'PathPrefix',
    );
    const v = r.string(p.value, `${path}.path.value`);
    if (v !== undefined && type !== 'RegularExpression' && !v.startsWith('/'))
      r.fail(`${path}.path.value`, 'must start with /');
    if (v !== undefined && type === 'RegularExpression') checkRegex(r, v, `${path}.path.value`);
    if (v !== undefined) match.path = { type, value: v };
  }
  match.headers = readValueMatches(r, o.headers, `${path}.headers`, (n) => n.toLowerCase());
  if (o.queryParams !== undefined) {
    const q = readValueMatches(r, o.queryParams, `${path}.queryParams`, (n) => n);
    if (q.length > 0) match.queryParams = q;
  }
  const method = r.string(o.method, `${path}.method`, { optional: true, pattern: TOKEN });
  if (method) match.method = method.toUpperCase();
  return match;
}

/**
 * Header or query-parameter matches (Gateway API HTTPHeaderMatch, HTTPQueryParamMatch): Exact
 * or RegularExpression on a token name. A name given twice is refused: the spec keeps only
 * the first, which would silently ignore the second.
 */
function readValueMatches(
  r: FieldReader,
  value: unknown,
  path: string,
  fold: (name: string) => string,
): ValueMatch[] {
  const seen = new Set<string>();
  const list = r.array(value, path);
  if (list.length > 16) r.fail(path, 'at most 16 entries');
  return list.flatMap((h, i) => {
    const at = `${path}[${i}]`;
    const q = r.object(h, at);
    if (!q) return [];
    r.onlyKeys(q, at, ['type', 'name', 'value']);
    const type = r.oneOf(q.type, `${at}.type`, ['Exact', 'RegularExpression'] as const, 'Exact');
    const name = r.string(q.name, `${at}.name`, { pattern: TOKEN });
    const v = typeof q.value === 'string' ? q.value : r.fail(`${at}.value`, 'must be a string');
    if (v !== undefined && type === 'RegularExpression') checkRegex(r, v, `${at}.value`);
    if (name === undefined || v === undefined) return [];
    const key = fold(name);
    if (seen.has(key)) r.fail(`${at}.name`, `${name} is matched twice`);
    seen.add(key);
    return [{ type, name: key, value: v }];
  });
}

/** Gateway API header matches (Exact or RegularExpression), names lower-cased; GRPCRoute's too. */
export function readHeaderMatches(r: FieldReader, value: unknown, path: string): RouteMatch['headers'] {
  return readValueMatches(r, value, path, (n) => n.toLowerCase());
}

export function checkRegex(r: FieldReader, source: string, path: string): void {
  if (source.length > MAX_REGEX_LENGTH) {
    r.fail(path, `regex longer than ${MAX_REGEX_LENGTH}`);
    return;
  }
  try {
    new RegExp(source);
  } catch (e) {
    r.fail(path, `invalid regex: ${(e as Error).message}`);
  }
}

export function readBackend(
  r: FieldReader,
  value: unknown,
  path: string,
  ns: string,
  matches: readonly RouteMatch[] = [],
): BackendRef | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  const ref = readServiceRef(r, o, path, ns, ['weight', 'filters']);
  const filters = readFilters(r, o.filters, `${path}.filters`, {
    allowed: BACKEND_FILTERS,
    matches,
    namespace: ns,
  });
  const weight = r.int(o.weight, `${path}.weight`, 0, 1_000_000, 1) ?? 1;
  return ref ? { ...ref, weight, ...(filters ? { filters } : {}) } : undefined;
}

function readRetry(r: FieldReader, value: unknown, path: string): RetryPolicy {
  const o = r.object(value, path) ?? {};
  r.onlyKeys(o, path, [
    'attempts',
    'retryOn',
    'perTryTimeout',
    'backoffBase',
    'backoffMax',
    'retryNonIdempotent',
  ]);
  const retryOnText = typeof o.retryOn === 'string' ? o.retryOn.split(',').map((s) => s.trim()) : o.retryOn;
  const retryOn = (r.strings(retryOnText, `${path}.retryOn`) ?? DEFAULT_RETRY.retryOn).flatMap((s) =>
    RETRY_ON.includes(s as RetryOn)
      ? [s as RetryOn]
      : (r.fail(`${path}.retryOn`, `unknown condition ${s}`) ?? []),
  );
  const policy: RetryPolicy = {
    attempts: r.int(o.attempts, `${path}.attempts`, 0, 10, DEFAULT_RETRY.attempts) ?? 0,
    retryOn,
    backoffBaseMs: r.duration(o.backoffBase, `${path}.backoffBase`, DEFAULT_RETRY.backoffBaseMs) ?? 0,
    backoffMaxMs: r.duration(o.backoffMax, `${path}.backoffMax`, DEFAULT_RETRY.backoffMaxMs) ?? 0,
    retryNonIdempotent: r.bool(o.retryNonIdempotent, `${path}.retryNonIdempotent`, false),
  };
  const perTry = r.duration(o.perTryTimeout, `${path}.perTryTimeout`);
  if (perTry !== undefined) policy.perTryTimeoutMs = perTry;
  return policy;
}

function readRateLimit(r: FieldReader, value: unknown, path: string): RateLimitPolicy {
  const o = r.object(value, path) ?? {};
  r.onlyKeys(o, path, ['maxTokens', 'tokensPerFill', 'fillInterval']);
  const maxTokens = r.int(o.maxTokens, `${path}.maxTokens`, 1, 1_000_000_000) ?? 1;
  return {
    maxTokens,
    tokensPerFill: r.int(o.tokensPerFill, `${path}.tokensPerFill`, 1, 1_000_000_000, maxTokens) ?? 1,
    fillIntervalMs: Math.max(1, r.duration(o.fillInterval, `${path}.fillInterval`, 1000) ?? 1000),
  };
}

function readFault(r: FieldReader, value: unknown, path: string): FaultPolicy {
  const o = r.object(value, path) ?? {};
  r.onlyKeys(o, path, ['delay', 'abort']);
  const fault: FaultPolicy = {};
  const d = r.optionalObject(o.delay, `${path}.delay`);
  if (d) {
    const percent = r.int(d.percent, `${path}.delay.percent`, 0, 100, 100) ?? 0;
    fault.delay = { percent, fixedDelayMs: r.duration(d.fixedDelay, `${path}.delay.fixedDelay`) ?? 0 };
  }
  const a = r.optionalObject(o.abort, `${path}.abort`);
  if (a) {
    const percent = r.int(a.percent, `${path}.abort.percent`, 0, 100, 100) ?? 0;
    fault.abort = { percent, httpStatus: r.int(a.httpStatus, `${path}.abort.httpStatus`, 200, 599) ?? 500 };
  }
  return fault;
}
