import {
  type Action,
  type Address,
  type Authorization,
  type Cidr,
  type Clause,
  cidrContains,
  type Match,
  makeCidr,
  type ParsedIp,
  parseIp,
  policyKey,
  type Scope,
  type ServiceAccountMatch,
  type StringMatch,
} from '@zmesh/shared';

/** One connection as the destination sees it, before normalisation. */
export interface ConnectionAttributes {
  /** Authenticated peer identity: `spiffe://td/ns/x/sa/y` or `td/ns/x/sa/y`; absent for plaintext. */
  readonly sourcePrincipal?: string;
  /**
   * Used only when the principal is absent or not `td/ns/<ns>/sa/<sa>`: the authenticated
   * identity always wins over a value a caller worked out some other way.
   */
  readonly sourceNamespace?: string;
  /** As sourceNamespace. */
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

/** `td/ns/<ns>/sa/<sa>` (SPIFFE ID path as Istio issues it), by index: this runs per connection. */
function identityParts(p: string): { ns: string; sa: string } | undefined {
  const a = p.indexOf('/');
  if (a <= 0 || !p.startsWith('/ns/', a)) return undefined;
  const b = p.indexOf('/', a + 4);
  if (b <= a + 4 || !p.startsWith('/sa/', b)) return undefined;
  const sa = p.slice(b + 4);
  if (sa === '' || sa.includes('/')) return undefined;
  return { ns: p.slice(a + 4, b), sa };
}

export function toSubject(conn: ConnectionAttributes): Subject | undefined {
  const src = parseIp(conn.sourceIp);
  const dst = parseIp(conn.destinationIp);
  if (src === undefined || dst === undefined) return undefined;
  const raw = conn.sourcePrincipal;
  const principal = raw === undefined || raw === '' ? undefined : raw.startsWith(SPIFFE) ? raw.slice(9) : raw;
  const id = principal === undefined ? undefined : identityParts(principal);
  return {
    principal,
    namespace: id?.ns ?? conn.sourceNamespace ?? '',
    serviceAccount: id?.sa ?? conn.sourceServiceAccount,
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

/** Field by field, cheapest first; explicit loops because closures here would allocate per call. */
function matchMatches(m: CompiledMatch, s: Subject): boolean {
  if (m.ports !== undefined && !m.ports.includes(s.port)) return false;
  if (m.notPorts?.includes(s.port)) return false;
  if (m.dst !== undefined && !anyCidr(m.dst, s.dst)) return false;
  if (m.notDst !== undefined && anyCidr(m.notDst, s.dst)) return false;
  if (m.src !== undefined && !anyCidr(m.src, s.src)) return false;
  if (m.notSrc !== undefined && anyCidr(m.notSrc, s.src)) return false;
  if (m.sa !== undefined && !anySa(m.sa, s)) return false;
  if (m.notSa !== undefined && anySa(m.notSa, s)) return false;
  // Without an identity no principal matcher matches, not even presence (ztunnel: no spiffe:// to strip).
  if (m.pr !== undefined && (s.principal === undefined || !anyStr(m.pr, s.principal))) return false;
  if (m.notPr !== undefined && s.principal !== undefined && anyStr(m.notPr, s.principal)) return false;
  if (m.ns !== undefined && !anyStr(m.ns, s.namespace)) return false;
  if (m.notNs !== undefined && anyStr(m.notNs, s.namespace)) return false;
  return true;
}

function anyCidr(list: readonly Cidr[], ip: ParsedIp): boolean {
  for (const c of list) if (cidrContains(c, ip)) return true;
  return false;
}

function anySa(list: readonly ServiceAccountMatch[], s: Subject): boolean {
  if (s.serviceAccount === undefined) return false;
  for (const a of list) if (a.namespace === s.namespace && a.serviceAccount === s.serviceAccount) return true;
  return false;
}

function anyStr(list: readonly Str[], value: string): boolean {
  for (const m of list) if (strMatches(m, value)) return true;
  return false;
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
