import type { FieldReader } from '@zmesh/shared';
import { GRPC_RULE_FILTERS, readFilters } from './filter-parser.js';
import { checkRegex, readBackend, readHeaderMatches, readRoute } from './route-parser.js';
import type { HttpRoute, RouteMatch, RouteRule } from './waypoint-config.js';

/** Gateway API GRPCRoute limits (GRPCRouteSpec CRD: 16 rules, 64 matches each, 128 in all). */
const MAX_RULES = 16;
const MAX_MATCHES_PER_RULE = 64;
const MAX_MATCHES = 128;
/** GRPCMethodMatch, type Exact: a proto package-qualified service name and a method name. */
const SERVICE = /^\.?[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_][A-Za-z_0-9]*)*$/;
const METHOD = /^[A-Za-z_][A-Za-z_0-9]*$/;
const MAX_NAME_LENGTH = 1024;
/** One path segment: what an absent service or method matches. */
const ANY_SEGMENT = '[^/]+';

/**
 * A Gateway API GRPCRoute (gateway.networking.k8s.io/v1) read into the route model the
 * HTTPRoute reader produces, so one RouteTable, one forwarder and one set of filters serve
 * both. gRPC names the call in the path, `/<package.Service>/<Method>` (gRPC over HTTP/2
 * spec), so a method match becomes a path match, as Istio translates GRPCRoute:
 *
 * | GRPCMethodMatch                   | path match                             |
 * | --------------------------------- | -------------------------------------- |
 * | Exact, service and method         | Exact `/svc/Method`                    |
 * | Exact, service only               | PathPrefix `/svc` (any method of it)   |
 * | Exact, method only                | RegularExpression `/[^/]+/Method`      |
 * | RegularExpression (either or both)| RegularExpression `/(svc)/(method)`, an absent one `[^/]+` |
 *
 * Precedence then follows the route table: a full method name first, then the longest
 * service, then method-only and regular-expression matches; header counts and route order
 * break ties (GRPCRoute's own order, except that regexes rank below every literal service).
 */
export function readGrpcRoute(
  r: FieldReader,
  value: unknown,
  path: string,
  defaultNs: string,
): HttpRoute | undefined {
  const route = readRoute(r, value, path, defaultNs, readGrpcRule);
  if (!route) return undefined;
  if (route.rules.length > MAX_RULES) r.fail(`${path}.rules`, `at most ${MAX_RULES} rules`);
  const total = route.rules.reduce((n, rule) => n + rule.matches.length, 0);
  if (total > MAX_MATCHES) r.fail(`${path}.rules`, `at most ${MAX_MATCHES} matches across all rules`);
  return route;
}

function readGrpcRule(r: FieldReader, value: unknown, path: string, ns: string): RouteRule | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'matches', 'filters', 'backendRefs']);
  const matches = r.array(o.matches, `${path}.matches`);
  if (matches.length > MAX_MATCHES_PER_RULE)
    r.fail(`${path}.matches`, `at most ${MAX_MATCHES_PER_RULE} matches`);
  const rule: RouteRule = {
    matches: matches.flatMap((m, i) => readGrpcMatch(r, m, `${path}.matches[${i}]`) ?? []),
    backendRefs: r
      .array(o.backendRefs, `${path}.backendRefs`)
      .flatMap((b, i) => readBackend(r, b, `${path}.backendRefs[${i}]`, ns) ?? []),
  };
  // GRPCRouteFilter: the header modifiers and RequestMirror, read and served as HTTPRoute's.
  const filters = readFilters(r, o.filters, `${path}.filters`, {
    allowed: GRPC_RULE_FILTERS,
    matches: rule.matches,
    namespace: ns,
  });
  if (filters) rule.filters = filters;
  return rule;
}

function readGrpcMatch(r: FieldReader, value: unknown, path: string): RouteMatch | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['method', 'headers']);
  const match: RouteMatch = { headers: readHeaderMatches(r, o.headers, `${path}.headers`) };
  const m = r.optionalObject(o.method, `${path}.method`);
  if (m) {
    r.onlyKeys(m, `${path}.method`, ['type', 'service', 'method']);
    const type = r.oneOf(m.type, `${path}.method.type`, ['Exact', 'RegularExpression'] as const, 'Exact');
    const service = r.string(m.service, `${path}.method.service`, { optional: true });
    const method = r.string(m.method, `${path}.method.method`, { optional: true });
    const at = (field: string) => `${path}.method.${field}`;
    if (service === undefined && method === undefined)
      r.fail(`${path}.method`, 'one or both of service or method must be specified');
    else if (type === 'Exact') {
      if (service !== undefined)
        checkName(r, service, SERVICE, at('service'), 'a service name (pkg.Service)');
      if (method !== undefined) checkName(r, method, METHOD, at('method'), 'a method name');
      match.path = exactPath(service, method);
    } else if (type === 'RegularExpression') {
      if (service !== undefined) checkRegex(r, service, at('service'));
      if (method !== undefined) checkRegex(r, method, at('method'));
      match.path = {
        type: 'RegularExpression',
        value: `/(?:${service ?? ANY_SEGMENT})/(?:${method ?? ANY_SEGMENT})`,
      };
    }
  }
  return match;
}

function checkName(r: FieldReader, value: string, pattern: RegExp, path: string, what: string): void {
  if (value.length > MAX_NAME_LENGTH) r.fail(path, `longer than ${MAX_NAME_LENGTH}`);
  else if (!pattern.test(value)) r.fail(path, `must be ${what}`);
}

function exactPath(service: string | undefined, method: string | undefined): RouteMatch['path'] {
  const svc = service?.replace(/^\./, '');
  if (svc !== undefined && method !== undefined) return { type: 'Exact', value: `/${svc}/${method}` };
  if (svc !== undefined) return { type: 'PathPrefix', value: `/${svc}` };
  // The method name matched the METHOD pattern: no regex metacharacters to escape.
  return { type: 'RegularExpression', value: `/${ANY_SEGMENT}/${method}` };
}
