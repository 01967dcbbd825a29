import type { HttpRoute, RouteMatch, RouteRule, ValueMatch } from '../config/waypoint-config.js';

export interface RequestFacts {
  method: string;
  /** Path without query. */
  path: string;
  host: string;
  header: (name: string) => string | undefined;
  /** The first value of a query parameter, decoded; read only by routes with queryParams matches. */
  query: (name: string) => string | undefined;
}

/** `query` for a table that reads no query parameters. */
export const NO_QUERY = (): undefined => undefined;

/** `query` for RequestFacts: parses the target's query once, on first use. */
export function queryReader(target: string): (name: string) => string | undefined {
  let params: URLSearchParams | undefined;
  return (name) => {
    if (params === undefined) {
      const q = target.indexOf('?');
      params = new URLSearchParams(q === -1 ? '' : target.slice(q + 1));
    }
    return params.get(name) ?? undefined;
  };
}

export interface MatchedRule {
  route: HttpRoute;
  rule: RouteRule;
  /** The match that selected the rule (URLRewrite/RequestRedirect ReplacePrefixMatch read its prefix). */
  match: RouteMatch;
  /** `namespace/name#index`: a bounded label for logs. */
  id: string;
}

interface CompiledMatch {
  route: HttpRoute;
  rule: RouteRule;
  match: RouteMatch;
  ruleIndex: number;
  test: (req: RequestFacts) => boolean;
  rank: number[];
  hostnames: string[];
}

/**
 * The HTTPRoutes attached to one service, flattened to their matches and sorted once by
 * Gateway API precedence (HTTPRouteRule "matches" doc): Exact path, then the longest
 * PathPrefix, then method, then the most header matches, then the most query-parameter
 * matches, then route order (the oldest route, then namespace/name, then rule index). RegularExpression precedence is implementation-specific; here it ranks below
 * every PathPrefix but "/", so that a broad regex cannot shadow a literal route and the
 * catch-all cannot shadow a regex.
 */
export class RouteTable {
  readonly #matches: CompiledMatch[];
  readonly #readsQuery: boolean;

  constructor(routes: readonly HttpRoute[]) {
    const sorted = [...routes].sort(routeOrder);
    const out: CompiledMatch[] = [];
    for (const route of sorted) {
      route.rules.forEach((rule, ruleIndex) => {
        const matches: RouteMatch[] =
          rule.matches.length > 0
            ? rule.matches
            : [{ path: { type: 'PathPrefix', value: '/' }, headers: [] }];
        for (const m of matches)
          out.push({
            route,
            rule,
            match: m,
            ruleIndex,
            test: compile(m),
            rank: rankOf(m),
            hostnames: route.hostnames,
          });
      });
    }
    this.#readsQuery = out.some((m) => (m.match.queryParams?.length ?? 0) > 0);
    // Stable sort keeps route order for equal ranks.
    this.#matches = out.sort((a, b) => compareRank(b.rank, a.rank));
  }

  /** Whether any match reads query parameters (so a request's query needs parsing at all). */
  get readsQuery(): boolean {
    return this.#readsQuery;
  }

  get empty(): boolean {
    return this.#matches.length === 0;
  }

  match(req: RequestFacts): MatchedRule | undefined {
    const host = req.host.toLowerCase().replace(/:\d+$/, '');
    for (const m of this.#matches) {
      if (m.hostnames.length > 0 && !m.hostnames.some((h) => hostMatches(h, host))) continue;
      if (m.test(req))
        return {
          route: m.route,
          rule: m.rule,
          match: m.match,
          id: `${m.route.namespace}/${m.route.name}#${m.ruleIndex}`,
        };
    }
    return undefined;
  }
}

function rankOf(m: RouteMatch): number[] {
  const p = m.path;
  const kind = !p ? 2 : p.type === 'Exact' ? 3 : 2;
  // A regex ranks just above the catch-all prefix "/" and below every longer prefix.
  const length = !p ? 1 : p.type === 'RegularExpression' ? 1.5 : p.value.length;
  return [kind, length, m.method ? 1 : 0, m.headers.length, m.queryParams?.length ?? 0];
}

function compareRank(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return 0;
}

function compile(m: RouteMatch): (req: RequestFacts) => boolean {
  const path = pathTest(m.path);
  const headers = m.headers.map((h) =>
    h.type === 'Exact'
      ? (req: RequestFacts) => req.header(h.name) === h.value
      : valueTest(h, (req) => req.header(h.name)),
  );
  const query = (m.queryParams ?? []).map((q) => valueTest(q, (req) => req.query(q.name)));
  const tests = [...headers, ...query];
  // The common match (a path, maybe a method, nothing else) tests nothing more per request.
  if (tests.length === 0)
    return (req) => (m.method === undefined || req.method === m.method) && path(req.path);
  return (req) =>
    (m.method === undefined || req.method === m.method) && path(req.path) && tests.every((t) => t(req));
}

function valueTest(
  v: ValueMatch,
  read: (req: RequestFacts) => string | undefined,
): (req: RequestFacts) => boolean {
  if (v.type === 'Exact') return (req) => read(req) === v.value;
  const re = new RegExp(`^(?:${v.value})$`);
  return (req) => {
    const got = read(req);
    return got !== undefined && re.test(got);
  };
}

function pathTest(p: RouteMatch['path']): (path: string) => boolean {
  if (!p) return () => true;
  if (p.type === 'Exact') return (path) => path === p.value;
  if (p.type === 'RegularExpression') {
    const re = new RegExp(`^(?:${p.value})$`);
    return (path) => re.test(path);
  }
  // Gateway API: a prefix matches whole path elements ("/foo" matches "/foo/bar", not "/foobar").
  const prefix = p.value.endsWith('/') && p.value.length > 1 ? p.value.slice(0, -1) : p.value;
  if (prefix === '/') return () => true;
  return (path) => path === prefix || path.startsWith(`${prefix}/`);
}

function hostMatches(pattern: string, host: string): boolean {
  if (pattern.startsWith('*.')) return host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1;
  return pattern === host;
}

/**
 * Gateway API's order for routes that tie: the oldest by creationTimestamp (a route without
 * one, from a file, ties on it), then `{namespace}/{name}` in alphabetical (code point) order.
 */
function routeOrder(a: HttpRoute, b: HttpRoute): number {
  if (a.createdAt !== undefined && b.createdAt !== undefined && a.createdAt !== b.createdAt)
    return a.createdAt - b.createdAt;
  const ka = `${a.namespace}/${a.name}`;
  const kb = `${b.namespace}/${b.name}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

/** Picks a backend index by weight; -1 when every weight is 0 (Gateway API: answer 500). */
export function pickWeighted(weights: readonly number[], random: () => number): number {
  const total = weights.reduce((a, b) => a + b, 0);
  if (total <= 0) return -1;
  let x = random() * total;
  for (let i = 0; i < weights.length; i++) {
    x -= weights[i]!;
    if (x < 0) return i;
  }
  return weights.length - 1;
}
