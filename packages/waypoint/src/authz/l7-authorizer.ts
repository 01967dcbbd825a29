import { type Cidr, cidrContains, type ParsedIp } from '@zmesh/shared';
import type {
  L7Policy,
  PolicyCondition,
  PolicyOperation,
  PolicyRule,
  PolicySource,
} from '../config/waypoint-config.js';
import type { RequestAuth } from './jwt-authenticator.js';

/** What a request is judged on. `http` is absent for opaque TCP and at CONNECT time. */
export interface AuthzContext {
  /** The peer's SPIFFE ID from the HBONE handshake: the source workload's identity. */
  principal: string;
  /** Destination port (the service port or the pod port in :authority). */
  port: number;
  /** `namespace/name` of the destination service, for policies that target a Service. */
  service?: string;
  /** The source workload's address (the tunnel's `Forwarded: for`); absent if not given. */
  sourceIp?: ParsedIp;
  /**
   * Istio's `remote.ip` when it is not the source: the client X-Forwarded-For names past the
   * trusted proxy hops (http/remote-address.ts), or `per-request` at CONNECT time when hops
   * are trusted (each request's header decides). Absent: no hop is trusted, so the source.
   */
  remoteIp?: ParsedIp | 'per-request';
  /** The address the tunnel was for (CONNECT :authority host). */
  destinationIp?: ParsedIp;
  http?: {
    method: string;
    /** The waypoint's normalized path, without the query string. */
    path: string;
    host: string;
    header: (name: string) => string | undefined;
    /** The verified JWT; absent when the request carried none. */
    auth?: RequestAuth;
  };
}

/**
 * How to treat a condition that needs HTTP when there is none (Istio's rule for TCP):
 * `tcp` judges opaque bytes, where an ALLOW rule with HTTP fields cannot match and a DENY
 * rule's HTTP fields are ignored (both err towards denying); `tunnel` asks at CONNECT time
 * whether every possible request would be denied, so only certain denials count.
 */
export type AuthzMode = 'http' | 'tcp' | 'tunnel';

/** `audit` names the first AUDIT policy that matched (Istio: mark the request for the access log). */
export type AuthzDecision = ({ allowed: true } | { allowed: false; policy: string }) & { audit?: string };

/** true, false, or undefined when the answer needs HTTP attributes that are absent. */
type Tri = boolean | undefined;

/**
 * Istio semantics: any matching DENY denies; else with ALLOW policies one must match; else
 * allow. AUDIT policies never decide: the first that matches is named in `audit`.
 */
export function authorize(policies: readonly L7Policy[], ctx: AuthzContext, mode: AuthzMode): AuthzDecision {
  const applicable = policies.filter(
    (p) => !p.targetServices || (ctx.service !== undefined && p.targetServices.includes(ctx.service)),
  );
  const decision = decide(applicable, ctx, mode);
  if (mode === 'tunnel') return decision;
  // Only a certain match is audited: an HTTP-only rule on opaque TCP does not mark it.
  const audit = applicable.find(
    (p) => p.action === 'AUDIT' && p.rules.some((rule) => matchRule(rule, ctx) === true),
  );
  return audit ? { ...decision, audit: `${audit.namespace}/${audit.name}` } : decision;
}

function decide(applicable: readonly L7Policy[], ctx: AuthzContext, mode: AuthzMode): AuthzDecision {
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
  const ns = namespaceOf(principal);
  const requestPrincipal = (): string | undefined =>
    ctx.http ? (ctx.http.auth?.principal ?? '') : undefined;
  return allOf([
    field(s.principals, (v) => stringMatch(stripSpiffe(v), principal)),
    notField(s.notPrincipals, (v) => stringMatch(stripSpiffe(v), principal)),
    field(s.namespaces, (v) => stringMatch(v, ns)),
    notField(s.notNamespaces, (v) => stringMatch(v, ns)),
    httpStrings(s.requestPrincipals, false, requestPrincipal),
    httpStrings(s.notRequestPrincipals, true, requestPrincipal),
    blocks(s.ipBlocks, false, ctx.sourceIp),
    blocks(s.notIpBlocks, true, ctx.sourceIp),
    blocks(s.remoteIpBlocks, false, remoteIpOf(ctx)),
    blocks(s.notRemoteIpBlocks, true, remoteIpOf(ctx)),
  ]);
}

/** A string field read from the request: unknown (undefined) without HTTP. */
function httpStrings(values: string[] | undefined, negate: boolean, value: () => string | undefined): Tri {
  if (values === undefined) return true;
  const v = value();
  if (v === undefined) return undefined;
  const hit = values.some((p) => stringMatch(p, v));
  return negate ? !hit : hit;
}

function remoteIpOf(ctx: AuthzContext): ParsedIp | 'per-request' | undefined {
  return ctx.remoteIp ?? ctx.sourceIp;
}

/** An address not given matches no block (so a `not` field holds); one decided per request is unknown. */
function blocks(list: Cidr[] | undefined, negate: boolean, ip: ParsedIp | 'per-request' | undefined): Tri {
  if (list === undefined) return true;
  if (ip === 'per-request') return undefined;
  const hit = ip !== undefined && list.some((c) => cidrContains(c, ip));
  return negate ? !hit : hit;
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
  const a = c.attr;
  switch (a.kind) {
    case 'sourceIp':
    case 'remoteIp':
    case 'destinationIp': {
      const ip =
        a.kind === 'destinationIp'
          ? ctx.destinationIp
          : a.kind === 'remoteIp'
            ? remoteIpOf(ctx)
            : ctx.sourceIp;
      return allOf([blocks(c.cidrs, false, ip), blocks(c.notCidrs, true, ip)]);
    }
    case 'destinationPort':
      return valuesMatch(c, [String(ctx.port)], (p, v) => p === v);
    case 'sourcePrincipal':
      return valuesMatch(c, [stripSpiffe(ctx.principal)]);
    case 'sourceNamespace':
      return valuesMatch(c, [namespaceOf(stripSpiffe(ctx.principal))]);
  }
  const h = ctx.http;
  if (!h) return undefined;
  switch (a.kind) {
    case 'header': {
      const v = h.header(a.name);
      return valuesMatch(c, v === undefined ? [] : [v]);
    }
    case 'requestPrincipal':
      return valuesMatch(c, h.auth ? [h.auth.principal] : []);
    case 'audiences':
      return valuesMatch(c, h.auth?.audiences ?? []);
    case 'presenter':
      return valuesMatch(c, h.auth?.presenter ? [h.auth.presenter] : []);
    case 'claim':
      return valuesMatch(c, claimValues(h.auth?.claims, a.path));
  }
}

/** `values`: some actual value matches some pattern; `notValues`: none does. No value matches no pattern. */
function valuesMatch(
  c: PolicyCondition,
  actual: readonly string[],
  test: (pattern: string, value: string) => boolean = stringMatch,
): boolean {
  const hit = (patterns: string[]) => actual.some((v) => patterns.some((p) => test(p, v)));
  if (c.values && !hit(c.values)) return false;
  if (c.notValues && hit(c.notValues)) return false;
  return true;
}

/**
 * A claim's values for matching (Istio: a string, or each string of a list); nested claims
 * by path. Numbers and booleans compare as their text; objects never match.
 */
export function claimValues(claims: Record<string, unknown> | undefined, path: readonly string[]): string[] {
  let v: unknown = claims;
  for (const k of path) {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return [];
    v = (v as Record<string, unknown>)[k];
  }
  const scalar = (x: unknown) =>
    typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean' ? [String(x)] : [];
  return Array.isArray(v) ? v.flatMap(scalar) : scalar(v);
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

function namespaceOf(principal: string): string {
  return /\/ns\/([^/]+)\//.exec(principal)?.[1] ?? '';
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
