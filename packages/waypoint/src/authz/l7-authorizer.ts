import type {
  L7Policy,
  PolicyCondition,
  PolicyOperation,
  PolicyRule,
  PolicySource,
} from '../config/waypoint-config.js';

/** What a request is judged on. `http` is absent for opaque TCP and at CONNECT time. */
export interface AuthzContext {
  /** The peer's SPIFFE ID from the HBONE handshake: the source workload's identity. */
  principal: string;
  /** Destination port (the service port or the pod port in :authority). */
  port: number;
  /** `namespace/name` of the destination service, for policies that target a Service. */
  service?: string;
  http?: {
    method: string;
    /** Path without the query string. */
    path: string;
    host: string;
    header: (name: string) => string | undefined;
  };
}

/**
 * How to treat a condition that needs HTTP when there is none (Istio's rule for TCP):
 * `tcp` judges opaque bytes, where an ALLOW rule with HTTP fields cannot match and a DENY
 * rule's HTTP fields are ignored (both err towards denying); `tunnel` asks at CONNECT time
 * whether every possible request would be denied, so only certain denials count.
 */
export type AuthzMode = 'http' | 'tcp' | 'tunnel';

export type AuthzDecision = { allowed: true } | { allowed: false; policy: string };

/** true, false, or undefined when the answer needs HTTP attributes that are absent. */
type Tri = boolean | undefined;

/** Istio semantics: any matching DENY denies; else with ALLOW policies one must match; else allow. */
export function authorize(policies: readonly L7Policy[], ctx: AuthzContext, mode: AuthzMode): AuthzDecision {
  const applicable = policies.filter(
    (p) => !p.targetServices || (ctx.service !== undefined && p.targetServices.includes(ctx.service)),
  );
  for (const p of applicable) {
    if (p.action !== 'DENY') continue;
    const unknownMatches = mode === 'tcp';
    if (p.rules.some((rule) => resolve(matchRule(rule, ctx), unknownMatches)))
      return { allowed: false, policy: `${p.namespace}/${p.name}` };
  }
  const allows = applicable.filter((p) => p.action === 'ALLOW');
  if (allows.length === 0) return { allowed: true };
  const unknownMatches = mode === 'tunnel';
  if (allows.some((p) => p.rules.some((rule) => resolve(matchRule(rule, ctx), unknownMatches))))
    return { allowed: true };
  return {
    allowed: false,
    policy: allows.length === 1 ? `${allows[0]!.namespace}/${allows[0]!.name}` : 'allow-list',
  };
}

function resolve(t: Tri, unknownMatches: boolean): boolean {
  return t === undefined ? unknownMatches : t;
}

function matchRule(rule: PolicyRule, ctx: AuthzContext): Tri {
  const from = rule.from.length === 0 ? true : anyOf(rule.from.map((s) => matchSource(s, ctx)));
  const to = rule.to.length === 0 ? true : anyOf(rule.to.map((o) => matchOperation(o, ctx)));
  return allOf([from, to, ...rule.when.map((c) => matchCondition(c, ctx))]);
}

function matchSource(s: PolicySource, ctx: AuthzContext): Tri {
  const principal = stripSpiffe(ctx.principal);
  const ns = /\/ns\/([^/]+)\//.exec(principal)?.[1] ?? '';
  return allOf([
    field(s.principals, (v) => stringMatch(stripSpiffe(v), principal)),
    notField(s.notPrincipals, (v) => stringMatch(stripSpiffe(v), principal)),
    field(s.namespaces, (v) => stringMatch(v, ns)),
    notField(s.notNamespaces, (v) => stringMatch(v, ns)),
  ]);
}

function matchOperation(o: PolicyOperation, ctx: AuthzContext): Tri {
  const h = ctx.http;
  const httpField = (values: string[] | undefined, negate: boolean, test: (v: string) => boolean): Tri => {
    if (values === undefined) return true;
    if (!h) return undefined;
    return negate ? !values.some(test) : values.some(test);
  };
  const host = h?.host.toLowerCase() ?? '';
  const hostNoPort = host.replace(/:\d+$/, '');
  const hostTest = (v: string) =>
    stringMatch(v.toLowerCase(), host) || stringMatch(v.toLowerCase(), hostNoPort);
  return allOf([
    httpField(o.methods, false, (v) => v === h?.method),
    httpField(o.notMethods, true, (v) => v === h?.method),
    httpField(o.paths, false, (v) => stringMatch(v, h?.path ?? '')),
    httpField(o.notPaths, true, (v) => stringMatch(v, h?.path ?? '')),
    httpField(o.hosts, false, hostTest),
    httpField(o.notHosts, true, hostTest),
    o.ports === undefined ? true : o.ports.includes(ctx.port),
    o.notPorts === undefined ? true : !o.notPorts.includes(ctx.port),
  ]);
}

function matchCondition(c: PolicyCondition, ctx: AuthzContext): Tri {
  if (!ctx.http) return undefined;
  const value = ctx.http.header(c.header);
  const hit = (vs: string[]) => value !== undefined && vs.some((v) => stringMatch(v, value));
  if (c.values && !hit(c.values)) return false;
  if (c.notValues && hit(c.notValues)) return false;
  return true;
}

function field(values: string[] | undefined, test: (v: string) => boolean): Tri {
  return values === undefined ? true : values.some(test);
}

function notField(values: string[] | undefined, test: (v: string) => boolean): Tri {
  return values === undefined ? true : !values.some(test);
}

/** Istio's string match: `*` any non-empty value, `abc*` prefix, `*abc` suffix, else exact. */
export function stringMatch(pattern: string, value: string): boolean {
  if (pattern === '*') return value.length > 0;
  if (pattern.endsWith('*')) return value.startsWith(pattern.slice(0, -1));
  if (pattern.startsWith('*')) return value.endsWith(pattern.slice(1));
  return pattern === value;
}

function stripSpiffe(p: string): string {
  return p.startsWith('spiffe://') ? p.slice('spiffe://'.length) : p;
}

function allOf(ts: Tri[]): Tri {
  if (ts.includes(false)) return false;
  return ts.includes(undefined) ? undefined : true;
}

function anyOf(ts: Tri[]): Tri {
  if (ts.includes(true)) return true;
  return ts.includes(undefined) ? undefined : false;
}
