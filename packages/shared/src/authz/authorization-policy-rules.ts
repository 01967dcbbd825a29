import { formatIp, parseCidr } from '../net/ip.js';
import {
  type Action,
  type Address,
  isRecord,
  type Match,
  type Rule,
  type StringMatch,
  show,
} from './policy-model.js';

/**
 * One AuthorizationPolicy rule (`from`, `to`, `when`) to the L4 model, as Istio's ambient
 * controller does (`pilot/pkg/serviceregistry/kube/controller/ambient/authorization.go`,
 * `handleRule`): each `from`, `to` and `when` becomes one clause; entries of a list are
 * OR'd matches. Attributes that need HTTP (L7) cannot be checked at ztunnel:
 * - in an ALLOW policy the whole rule is dropped, so it can never allow (fail closed);
 * - in a DENY policy the L7 conditions are dropped, so the rule denies more than asked.
 *   Istio emits an empty Match where an entry had only L7 attributes, and ztunnel skips
 *   empty matches, so such a DENY rule would match nothing (fail open). Here that entry
 *   matches everything instead, which is what "more restrictive" requires.
 */
export interface RuleContext {
  readonly action: Action;
  /** The policy's namespace: a bare service account name belongs to it. */
  readonly namespace: string;
  readonly reasons: string[];
  readonly warnings: string[];
}

export interface RuleOutcome {
  /** Undefined when an ALLOW rule was dropped for needing L7 attributes. */
  readonly rule?: Rule;
  /** Names of the L7 attributes found (field names and `when` keys). */
  readonly l7: readonly string[];
}

const SOURCE_L4 = [
  'principals',
  'notPrincipals',
  'namespaces',
  'notNamespaces',
  'serviceAccounts',
  'notServiceAccounts',
  'ipBlocks',
  'notIpBlocks',
];
const SOURCE_L7 = ['requestPrincipals', 'notRequestPrincipals', 'remoteIpBlocks', 'notRemoteIpBlocks'];
const OPERATION_L4 = ['ports', 'notPorts'];
const OPERATION_L7 = ['hosts', 'notHosts', 'methods', 'notMethods', 'paths', 'notPaths'];
/** Condition keys ztunnel can check (Istio's l4WhenAttributes). */
const WHEN_L4 = ['source.ip', 'source.namespace', 'source.principal', 'destination.ip', 'destination.port'];
/** Istio's other documented condition keys; anything else is a typo, not a wildcard. */
const WHEN_L7 =
  /^(remote\.ip|request\.auth\.(principal|audiences|presenter)|connection\.sni|request\.headers\[[^\]]+\]|request\.auth\.claims\[.+\]|experimental\.envoy\.filters\..+)$/;

export function convertRule(raw: unknown, path: string, ctx: RuleContext): RuleOutcome {
  if (!isRecord(raw)) {
    ctx.reasons.push(`${path}: must be an object`);
    return { l7: [] };
  }
  unknownKeys(raw, ['from', 'to', 'when'], path, ctx.reasons);
  const l7: string[] = [];
  const clauses: Match[][] = [];
  const to = entries(raw.to, `${path}.to`, 'operation', ctx.reasons);
  const from = entries(raw.from, `${path}.from`, 'source', ctx.reasons);
  for (const list of [convertAll(to, convertOperation, ctx, l7), convertAll(from, convertSource, ctx, l7)]) {
    // An entry reduced to nothing by dropping L7 attributes matches anything: the clause is always true.
    if (list.length > 0 && !list.includes(undefined)) clauses.push(list as Match[]);
  }
  const when = listOf(raw.when, `${path}.when`, ctx.reasons);
  for (let i = 0; i < when.length; i++) {
    const m = convertCondition(when[i], `${path}.when[${i}]`, ctx, l7);
    const c = m === undefined ? undefined : compact(m);
    if (c !== undefined) clauses.push([c]);
  }
  if (l7.length > 0 && ctx.action === 'ALLOW') return { l7 };
  return { rule: { clauses: clauses.map((matches) => ({ matches })) }, l7 };
}

type Converter = (
  body: Record<string, unknown>,
  path: string,
  ctx: RuleContext,
  l7: string[],
) => Match | undefined;

/** Converts each entry; undefined marks one that had only L7 attributes. */
function convertAll(
  list: [Record<string, unknown>, string][],
  convert: Converter,
  ctx: RuleContext,
  l7: string[],
) {
  return list.map(([body, path]) => {
    const [l7Before, reasonsBefore] = [l7.length, ctx.reasons.length];
    const m = convert(body, path, ctx, l7);
    // Reported only when nothing else explains the emptiness (an invalid value already did).
    if (m === undefined && l7.length === l7Before && ctx.reasons.length === reasonsBefore) {
      ctx.reasons.push(`${path}: has no condition`);
    }
    return m;
  });
}

/** `from: [{source: …}]` / `to: [{operation: …}]`: the inner objects with their paths. */
function entries(
  v: unknown,
  path: string,
  inner: string,
  reasons: string[],
): [Record<string, unknown>, string][] {
  const out: [Record<string, unknown>, string][] = [];
  const list = listOf(v, path, reasons);
  for (let i = 0; i < list.length; i++) {
    const e = list[i];
    const p = `${path}[${i}]`;
    if (!isRecord(e) || !isRecord(e[inner])) {
      reasons.push(`${p}.${inner}: must be an object`);
      continue;
    }
    unknownKeys(e, [inner], p, reasons);
    out.push([e[inner] as Record<string, unknown>, `${p}.${inner}`]);
  }
  return out;
}

function convertSource(
  s: Record<string, unknown>,
  path: string,
  ctx: RuleContext,
  l7: string[],
): Match | undefined {
  unknownKeys(s, [...SOURCE_L4, ...SOURCE_L7], path, ctx.reasons);
  for (const f of SOURCE_L7) {
    const values = strings(s[f], `${path}.${f}`, ctx.reasons);
    if (f.endsWith('IpBlocks')) cidrs(values, `${path}.${f}`, ctx.reasons);
    if (values.length > 0) l7.push(f);
  }
  const p = (f: string) => `${path}.${f}`;
  const m: Match = {
    principals: principalMatches(s.principals, p('principals'), ctx),
    notPrincipals: principalMatches(s.notPrincipals, p('notPrincipals'), ctx),
    namespaces: wildcards(strings(s.namespaces, p('namespaces'), ctx.reasons), p('namespaces'), ctx.reasons),
    notNamespaces: wildcards(
      strings(s.notNamespaces, p('notNamespaces'), ctx.reasons),
      p('notNamespaces'),
      ctx.reasons,
    ),
    serviceAccounts: serviceAccounts(s.serviceAccounts, p('serviceAccounts'), ctx),
    notServiceAccounts: serviceAccounts(s.notServiceAccounts, p('notServiceAccounts'), ctx),
    sourceIps: cidrs(strings(s.ipBlocks, p('ipBlocks'), ctx.reasons), p('ipBlocks'), ctx.reasons),
    notSourceIps: cidrs(strings(s.notIpBlocks, p('notIpBlocks'), ctx.reasons), p('notIpBlocks'), ctx.reasons),
  };
  return compact(m);
}

function convertOperation(
  o: Record<string, unknown>,
  path: string,
  ctx: RuleContext,
  l7: string[],
): Match | undefined {
  unknownKeys(o, [...OPERATION_L4, ...OPERATION_L7], path, ctx.reasons);
  for (const f of OPERATION_L7) {
    if (strings(o[f], `${path}.${f}`, ctx.reasons).length > 0) l7.push(f);
  }
  return compact({
    destinationPorts: ports(o.ports, `${path}.ports`, ctx.reasons),
    notDestinationPorts: ports(o.notPorts, `${path}.notPorts`, ctx.reasons),
  });
}

/** A `when` condition: a one-match clause for L4 keys; undefined (always true) for L7 ones. */
function convertCondition(w: unknown, path: string, ctx: RuleContext, l7: string[]): Match | undefined {
  if (!isRecord(w) || typeof w.key !== 'string') {
    ctx.reasons.push(`${path}.key: must be a string`);
    return undefined;
  }
  unknownKeys(w, ['key', 'values', 'notValues'], path, ctx.reasons);
  const values = strings(w.values, `${path}.values`, ctx.reasons);
  const notValues = strings(w.notValues, `${path}.notValues`, ctx.reasons);
  if (values.length === 0 && notValues.length === 0) ctx.reasons.push(`${path}: needs values or notValues`);
  const key = w.key;
  const vp = `${path}.values`;
  const np = `${path}.notValues`;
  switch (key) {
    case 'source.ip':
      return { sourceIps: cidrs(values, vp, ctx.reasons), notSourceIps: cidrs(notValues, np, ctx.reasons) };
    case 'destination.ip':
      return {
        destinationIps: cidrs(values, vp, ctx.reasons),
        notDestinationIps: cidrs(notValues, np, ctx.reasons),
      };
    case 'destination.port':
      return {
        destinationPorts: ports(values, vp, ctx.reasons),
        notDestinationPorts: ports(notValues, np, ctx.reasons),
      };
    case 'source.namespace':
      return {
        namespaces: wildcards(values, vp, ctx.reasons),
        notNamespaces: wildcards(notValues, np, ctx.reasons),
      };
    case 'source.principal':
      return {
        principals: principalMatches(values, vp, ctx),
        notPrincipals: principalMatches(notValues, np, ctx),
      };
  }
  if (!WHEN_L7.test(key)) {
    ctx.reasons.push(
      `${path}.key: unknown condition key ${JSON.stringify(key)} (ztunnel checks ${WHEN_L4.join(', ')})`,
    );
  } else {
    if (key === 'remote.ip') {
      cidrs(values, vp, ctx.reasons);
      cidrs(notValues, np, ctx.reasons);
    }
    l7.push(key);
  }
  return undefined;
}

function compact(m: Match): Match | undefined {
  const out = Object.fromEntries(Object.entries(m).filter(([, v]) => (v as unknown[]).length > 0));
  return Object.keys(out).length === 0 ? undefined : (out as Match);
}

function listOf(v: unknown, path: string, reasons: string[]): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) {
    reasons.push(`${path}: must be a list`);
    return [];
  }
  return v;
}

function strings(v: unknown, path: string, reasons: string[]): string[] {
  const out: string[] = [];
  const list = listOf(v, path, reasons);
  for (let i = 0; i < list.length; i++) {
    const s = list[i];
    if (typeof s === 'string' && s !== '') out.push(s);
    else reasons.push(`${path}[${i}]: must be a non-empty string, got ${show(s)}`);
  }
  return out;
}

export function unknownKeys(
  o: Record<string, unknown>,
  known: readonly string[],
  path: string,
  reasons: string[],
): void {
  for (const k of Object.keys(o)) {
    if (!known.includes(k)) reasons.push(`${path}.${k}: unknown field`);
  }
}

/** Istio's wildcards: `*` any non-empty value, `*x` suffix, `x*` prefix; nowhere else. */
function wildcards(values: string[], path: string, reasons: string[]): StringMatch[] {
  return values.map((v, i): StringMatch => {
    if (v === '*') return { presence: {} };
    const inner = v.slice(1, -1);
    if (inner.includes('*') || (v.startsWith('*') && v.endsWith('*'))) {
      reasons.push(`${path}[${i}]: ${JSON.stringify(v)} has a wildcard other than at the start or end`);
    }
    if (v.startsWith('*')) return { suffix: v.slice(1) };
    if (v.endsWith('*')) return { prefix: v.slice(0, -1) };
    return { exact: v };
  });
}

/** Principals are written without `spiffe://` (Istio compares them that way); a scheme is stripped. */
function principalMatches(v: unknown, path: string, ctx: RuleContext): StringMatch[] {
  const values = strings(v, path, ctx.reasons).map((s, i) => {
    if (!s.startsWith('spiffe://')) return s;
    ctx.warnings.push(`${path}[${i}]: principals are written without spiffe://; using ${s.slice(9)}`);
    return s.slice(9);
  });
  return wildcards(values, path, ctx.reasons);
}

function serviceAccounts(v: unknown, path: string, ctx: RuleContext) {
  return strings(v, path, ctx.reasons).flatMap((s, i) => {
    const parts = s.split('/');
    if (parts.length > 2 || parts.some((x) => x === '' || x.includes('*'))) {
      ctx.reasons.push(
        `${path}[${i}]: ${JSON.stringify(s)} must be "namespace/name" or "name", without wildcards`,
      );
      return [];
    }
    const [ns, sa] = parts.length === 2 ? parts : [ctx.namespace, parts[0]];
    return [{ namespace: ns!, serviceAccount: sa! }];
  });
}

function cidrs(values: string[], path: string, reasons: string[]): Address[] {
  return values.flatMap((v, i) => {
    const c = parseCidr(v);
    if (typeof c === 'string') {
      reasons.push(`${path}[${i}]: ${c}`);
      return [];
    }
    return [{ address: formatIp({ v4: c.v4, w: c.net }), length: c.bits }];
  });
}

/** Ports are strings in the CRD; YAML may give numbers. 1..65535, decimal only. */
function ports(v: unknown, path: string, reasons: string[]): number[] {
  return listOf(v, path, reasons).flatMap((p, i) => {
    const n =
      typeof p === 'number' ? p : typeof p === 'string' && /^\d{1,5}$/.test(p) ? Number(p) : Number.NaN;
    if (Number.isInteger(n) && n >= 1 && n <= 65535) return [n];
    reasons.push(`${path}[${i}]: port must be an integer in 1..65535, got ${show(p)}`);
    return [];
  });
}
