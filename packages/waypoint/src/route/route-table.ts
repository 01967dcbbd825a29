import type { HttpRoute, RouteMatch, RouteRule } from '../config/waypoint-config.js';

export interface RequestFacts {
  method: string;
  /** Path without query. */
  path: string;
  host: string;
  header: (name: string) => string | undefined;
}

export interface MatchedRule {
  route: HttpRoute;
  rule: RouteRule;
  /** `namespace/name#index`: a bounded label for logs. */
  id: string;
}

interface CompiledMatch {
  route: HttpRoute;
  rule: RouteRule;
  ruleIndex: number;
  test: (req: RequestFacts) => boolean;
  rank: number[];
  hostnames: string[];
}

/**
 * The HTTPRoutes attached to one service, flattened to their matches and sorted once by
 * Gateway API precedence (HTTPRouteRule "matches" doc): Exact path, then the longest
 * PathPrefix, then method, then the most header matches, then route order (namespace/name,
 * rule index). RegularExpression precedence is implementation-specific; here it ranks below
 * every PathPrefix but "/", so that a broad regex cannot shadow a literal route and the
 * catch-all cannot shadow a regex.
 */
export class RouteTable {
  readonly #matches: CompiledMatch[];

  constructor(routes: readonly HttpRoute[]) {
    const sorted = [...routes].sort((a, b) =>
      `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`),
    );
    const out: CompiledMatch[] = [];
    for (const route of sorted) {
      route.rules.forEach((rule, ruleIndex) => {
        const matches: RouteMatch[] =
          rule.matches.length > 0
            ? rule.matches
            : [{ path: { type: 'PathPrefix', value: '/' }, headers: [] }];
        for (const m of matches)
          out.push({ route, rule, ruleIndex, test: compile(m), rank: rankOf(m), hostnames: route.hostnames });
      });
    }
    // Stable sort keeps route order for equal ranks.
    this.#matches = out.sort((a, b) => compareRank(b.rank, a.rank));
  }

  get empty(): boolean {
    return this.#matches.length === 0;
  }

  match(req: RequestFacts): MatchedRule | undefined {
    const host = req.host.toLowerCase().replace(/:\d+$/, '');
    for (const m of this.#matches) {
      if (m.hostnames.length > 0 && !m.hostnames.some((h) => hostMatches(h, host))) continue;
      if (m.test(req))
        return { route: m.route, rule: m.rule, id: `${m.route.namespace}/${m.route.name}#${m.ruleIndex}` };
    }
    return undefined;
  }
}

function rankOf(m: RouteMatch): number[] {
  const p = m.path;
  const kind = !p ? 2 : p.type === 'Exact' ? 3 : 2;
  // A regex ranks just above the catch-all prefix "/" and below every longer prefix.
  const length = !p ? 1 : p.type === 'RegularExpression' ? 1.5 : p.value.length;
  return [kind, length, m.method ? 1 : 0, m.headers.length];
}

function compareRank(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return 0;
}

function compile(m: RouteMatch): (req: RequestFacts) => boolean {
  const path = pathTest(m.path);
  const headers = m.headers.map((h) => {
    if (h.type === 'Exact') return (req: RequestFacts) => req.header(h.name) === h.value;
    const re = new RegExp(`^(?:${h.value})$`);
    return (req: RequestFacts) => {
      const v = req.header(h.name);
      return v !== undefined && re.test(v);
    };
  });
  return (req) =>
    (m.method === undefined || req.method === m.method) && path(req.path) && headers.every((t) => t(req));
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
