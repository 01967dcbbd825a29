import type { FieldReader } from '@zmesh/shared';
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
} from './waypoint-config.js';

/** A regex longer than this is refused: routes are matched on every request. */
const MAX_REGEX_LENGTH = 1024;
const RETRY_ON: readonly RetryOn[] = ['5xx', 'gateway-error', 'reset', 'connect-failure'];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export function readRoute(
  r: FieldReader,
  value: unknown,
  path: string,
  defaultNs: string,
): HttpRoute | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'parentRefs', 'hostnames', 'rules']);
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
    .flatMap((x, i) => readRule(r, x, `${path}.rules[${i}]`, namespace) ?? []);
  return {
    name: r.string(o.name, `${path}.name`) ?? '',
    namespace,
    parentRefs,
    hostnames: (r.strings(o.hostnames, `${path}.hostnames`) ?? []).map((h) => h.toLowerCase()),
    rules,
  };
}

function readRule(r: FieldReader, value: unknown, path: string, ns: string): RouteRule | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['matches', 'backendRefs', 'timeouts', 'retry', 'rateLimit', 'fault']);
  const rule: RouteRule = {
    matches: r
      .array(o.matches, `${path}.matches`)
      .flatMap((m, i) => readMatch(r, m, `${path}.matches[${i}]`) ?? []),
    backendRefs: r
      .array(o.backendRefs, `${path}.backendRefs`)
      .flatMap((b, i) => readBackend(r, b, `${path}.backendRefs[${i}]`, ns) ?? []),
  };
  const timeouts = r.optionalObject(o.timeouts, `${path}.timeouts`);
  if (timeouts) {
    r.onlyKeys(timeouts, `${path}.timeouts`, ['request']);
    const requestMs = r.duration(timeouts.request, `${path}.timeouts.request`);
    if (requestMs !== undefined) rule.timeouts = { requestMs };
  }
  if (o.retry !== undefined) rule.retry = readRetry(r, o.retry, `${path}.retry`);
  if (o.rateLimit !== undefined) rule.rateLimit = readRateLimit(r, o.rateLimit, `${path}.rateLimit`);
  if (o.fault !== undefined) rule.fault = readFault(r, o.fault, `${path}.fault`);
  return rule;
}

function readMatch(r: FieldReader, value: unknown, path: string): RouteMatch | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['path', 'headers', 'method']);
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
  match.headers = r.array(o.headers, `${path}.headers`).flatMap((h, i) => {
    const q = r.object(h, `${path}.headers[${i}]`);
    if (!q) return [];
    const type = r.oneOf(
      q.type,
      `${path}.headers[${i}].type`,
      ['Exact', 'RegularExpression'] as const,
      'Exact',
    );
    const name = r.string(q.name, `${path}.headers[${i}].name`, { pattern: TOKEN });
    const v =
      typeof q.value === 'string' ? q.value : r.fail(`${path}.headers[${i}].value`, 'must be a string');
    if (v !== undefined && type === 'RegularExpression') checkRegex(r, v, `${path}.headers[${i}].value`);
    return name !== undefined && v !== undefined ? [{ type, name: name.toLowerCase(), value: v }] : [];
  });
  const method = r.string(o.method, `${path}.method`, { optional: true, pattern: TOKEN });
  if (method) match.method = method.toUpperCase();
  return match;
}

function checkRegex(r: FieldReader, source: string, path: string): void {
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

function readBackend(r: FieldReader, value: unknown, path: string, ns: string): BackendRef | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['kind', 'group', 'name', 'namespace', 'port', 'weight']);
  const name = r.string(o.name, `${path}.name`);
  const port = o.port === undefined ? undefined : r.port(o.port, `${path}.port`);
  const weight = r.int(o.weight, `${path}.weight`, 0, 1_000_000, 1) ?? 1;
  const namespace = r.string(o.namespace, `${path}.namespace`, { optional: true }) ?? ns;
  return name ? { name, namespace, weight, ...(port ? { port } : {}) } : undefined;
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
