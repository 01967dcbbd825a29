import { type Cidr, cidrContains, makeCidr, type ParsedIp, parseIp } from './ip-cidr.js';
import {
  type Action,
  type Address,
  type Authorization,
  type Clause,
  type Match,
  policyKey,
  type Scope,
  type ServiceAccountMatch,
  type StringMatch,
} from './policy-model.js';

/** One connection as the destination sees it, before normalisation. */
export interface ConnectionAttributes {
  /** Authenticated peer identity: `spiffe://td/ns/x/sa/y` or `td/ns/x/sa/y`; absent for plaintext. */
  readonly sourcePrincipal?: string;
  /** Defaults to the namespace in the principal. */
  readonly sourceNamespace?: string;
  /** Defaults to the service account in the principal. */
  readonly sourceServiceAccount?: string;
  readonly sourceIp: string;
  readonly destinationIp: string;
  readonly destinationPort: number;
}

/** A connection parsed once per decision, so that policies compare words, not text. */
export interface Subject {
  /** Without `spiffe://`; undefined when there is no identity (principal matchers never match). */
  readonly principal: string | undefined;
  /** '' without an identity, as ztunnel does. */
  readonly namespace: string;
  readonly serviceAccount: string | undefined;
  readonly src: ParsedIp;
  readonly dst: ParsedIp;
  readonly port: number;
}

const SPIFFE = 'spiffe://';
const IDENTITY = /^[^/]+\/ns\/([^/]+)\/sa\/([^/]+)$/;

export function toSubject(conn: ConnectionAttributes): Subject | undefined {
  const src = parseIp(conn.sourceIp);
  const dst = parseIp(conn.destinationIp);
  if (src === undefined || dst === undefined) return undefined;
  const raw = conn.sourcePrincipal;
  const principal = raw === undefined || raw === '' ? undefined : raw.startsWith(SPIFFE) ? raw.slice(9) : raw;
  const parts = principal === undefined ? null : IDENTITY.exec(principal);
  return {
    principal,
    namespace: conn.sourceNamespace ?? parts?.[1] ?? '',
    serviceAccount: conn.sourceServiceAccount ?? parts?.[2],
    src,
    dst,
    port: conn.destinationPort,
  };
}

/** A StringMatch in one shape, so matching is a switch, not a series of `in` tests. */
interface Str {
  readonly kind: 'exact' | 'prefix' | 'suffix' | 'presence';
  readonly value: string;
}

/** A Match with CIDRs parsed and empty fields dropped to `undefined` (no constraint). */
interface CompiledMatch {
  readonly ns?: readonly Str[];
  readonly notNs?: readonly Str[];
  readonly sa?: readonly ServiceAccountMatch[];
  readonly notSa?: readonly ServiceAccountMatch[];
  readonly pr?: readonly Str[];
  readonly notPr?: readonly Str[];
  readonly src?: readonly Cidr[];
  readonly notSrc?: readonly Cidr[];
  readonly dst?: readonly Cidr[];
  readonly notDst?: readonly Cidr[];
  readonly ports?: readonly number[];
  readonly notPorts?: readonly number[];
}

export interface CompiledPolicy {
  readonly key: string;
  readonly namespace: string;
  readonly scope: Scope;
  readonly action: Action;
  readonly dryRun: boolean;
  /** rules → clauses → matches, simplified by compileRule: every clause here has ≥ 1 non-empty match. */
  readonly rules: readonly (readonly (readonly CompiledMatch[])[])[];
  readonly source: Authorization;
}

/** Compiles a validated Authorization; CIDRs were checked by validateAuthorization. */
export function compilePolicy(a: Authorization): CompiledPolicy {
  const rules: CompiledMatch[][][] = [];
  for (const r of a.rules) {
    const rule = compileRule(r.clauses);
    if (rule !== undefined) rules.push(rule);
  }
  return {
    key: policyKey(a),
    namespace: a.namespace,
    scope: a.scope,
    action: a.action,
    dryRun: a.dryRun,
    rules,
    source: a,
  };
}

/**
 * A clause with no matches always matches, so it is left out; a clause whose matches are
 * all empty never matches (ztunnel skips empty matches), so its rule can never match and
 * is left out (undefined). What remains needs no special cases at evaluation time.
 */
function compileRule(clauses: readonly Clause[]): CompiledMatch[][] | undefined {
  const out: CompiledMatch[][] = [];
  for (const c of clauses) {
    if (c.matches.length === 0) continue;
    const matches = c.matches.map(compileMatch).filter((m): m is CompiledMatch => m !== undefined);
    if (matches.length === 0) return undefined;
    out.push(matches);
  }
  return out;
}

function compileMatch(m: Match): CompiledMatch | undefined {
  const out: CompiledMatch = {
    ns: strs(m.namespaces),
    notNs: strs(m.notNamespaces),
    sa: nonEmpty(m.serviceAccounts),
    notSa: nonEmpty(m.notServiceAccounts),
    pr: strs(m.principals),
    notPr: strs(m.notPrincipals),
    src: cidrs(m.sourceIps),
    notSrc: cidrs(m.notSourceIps),
    dst: cidrs(m.destinationIps),
    notDst: cidrs(m.notDestinationIps),
    ports: nonEmpty(m.destinationPorts),
    notPorts: nonEmpty(m.notDestinationPorts),
  };
  return Object.values(out).some((v) => v !== undefined) ? out : undefined;
}

function nonEmpty<T>(xs: readonly T[] | undefined): readonly T[] | undefined {
  return xs === undefined || xs.length === 0 ? undefined : xs;
}

function strs(xs: readonly StringMatch[] | undefined): readonly Str[] | undefined {
  if (xs === undefined || xs.length === 0) return undefined;
  return xs.map(toStr);
}

function toStr(m: StringMatch): Str {
  const r = m as Partial<Record<'exact' | 'prefix' | 'suffix', string>>;
  if (r.exact !== undefined) return { kind: 'exact', value: r.exact };
  if (r.prefix !== undefined) return { kind: 'prefix', value: r.prefix };
  if (r.suffix !== undefined) return { kind: 'suffix', value: r.suffix };
  return { kind: 'presence', value: '' };
}

function cidrs(xs: readonly Address[] | undefined): readonly Cidr[] | undefined {
  if (xs === undefined || xs.length === 0) return undefined;
  return xs.map((a) => {
    const c = makeCidr(a.address, a.length);
    if (typeof c === 'string') throw new TypeError(`unvalidated CIDR reached compile: ${c}`);
    return c;
  });
}

export function policyMatches(p: CompiledPolicy, s: Subject): boolean {
  for (const rule of p.rules) {
    if (ruleMatches(rule, s)) return true;
  }
  return false;
}

function ruleMatches(rule: readonly (readonly CompiledMatch[])[], s: Subject): boolean {
  for (const clause of rule) {
    let any = false;
    for (const m of clause) {
      if (matchMatches(m, s)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  return true;
}

function matchMatches(m: CompiledMatch, s: Subject): boolean {
  return (
    field(m.dst, m.notDst, (c) => cidrContains(c, s.dst)) &&
    field(m.src, m.notSrc, (c) => cidrContains(c, s.src)) &&
    field(m.ports, m.notPorts, (p) => p === s.port) &&
    field(m.sa, m.notSa, (a) => s.serviceAccount !== undefined && saMatches(a, s)) &&
    field(m.pr, m.notPr, (x) => s.principal !== undefined && strMatches(x, s.principal)) &&
    field(m.ns, m.notNs, (x) => strMatches(x, s.namespace))
  );
}

function saMatches(a: ServiceAccountMatch, s: Subject): boolean {
  return a.namespace === s.namespace && a.serviceAccount === s.serviceAccount;
}

function field<T>(
  pos: readonly T[] | undefined,
  neg: readonly T[] | undefined,
  pred: (x: T) => boolean,
): boolean {
  if (pos !== undefined && !pos.some(pred)) return false;
  if (neg?.some(pred)) return false;
  return true;
}

function strMatches(m: Str, value: string): boolean {
  switch (m.kind) {
    case 'exact':
      return value === m.value;
    case 'prefix':
      return value.startsWith(m.value);
    case 'suffix':
      return value.endsWith(m.value);
    default:
      return value !== '';
  }
}

/** StringMatch semantics on the model type (used by the reference model in tests). */
export function stringMatches(m: StringMatch, value: string): boolean {
  return strMatches(toStr(m), value);
}
