import { makeCidr } from '../net/ip.js';
import { err, ok, type Result } from '../result.js';

/**
 * The L4 authorization model, mirroring `istio.security.Authorization` (xds/proto/istio/security/authorization.proto) as ztunnel
 * enforces it. Nesting and its meaning (Istio ztunnel `src/rbac.rs`):
 * - a policy matches if ANY rule matches; a policy with no rules matches nothing, whatever
 *   its action (`if self.rules.is_empty() { return false }`). So an ALLOW policy with no
 *   rules still counts as an ALLOW policy that applies and denies every connection it
 *   covers (Istio's documented "deny all"), while a DENY policy with no rules has no effect;
 * - a rule matches if ALL its clauses match; a rule with no clauses matches everything;
 * - a clause matches if ANY of its matches matches; a clause with no matches matches;
 * - a match matches if every non-empty field matches (OR within a field, and no entry of a
 *   `not*` field matches). A match with every field empty is skipped: it matches nothing.
 */
export type Scope = 'GLOBAL' | 'NAMESPACE' | 'WORKLOAD_SELECTOR';
export type Action = 'ALLOW' | 'DENY';

const SCOPES: readonly Scope[] = ['GLOBAL', 'NAMESPACE', 'WORKLOAD_SELECTOR'];
const ACTIONS: readonly Action[] = ['ALLOW', 'DENY'];

/** The proto oneof `match_type`; `presence` matches any non-empty value. */
export type StringMatch =
  | { readonly exact: string }
  | { readonly prefix: string }
  | { readonly suffix: string }
  | { readonly presence: Readonly<Record<string, never>> };

export interface ServiceAccountMatch {
  readonly namespace: string;
  readonly serviceAccount: string;
}

/** A CIDR block: address as IP text (the proto carries bytes) and prefix length. */
export interface Address {
  readonly address: string;
  readonly length: number;
}

/** Every field is optional; absent and empty mean the same (no constraint). */
export interface Match {
  readonly namespaces?: readonly StringMatch[];
  readonly notNamespaces?: readonly StringMatch[];
  readonly serviceAccounts?: readonly ServiceAccountMatch[];
  readonly notServiceAccounts?: readonly ServiceAccountMatch[];
  /** Compared with the peer identity without its `spiffe://` scheme. */
  readonly principals?: readonly StringMatch[];
  readonly notPrincipals?: readonly StringMatch[];
  readonly sourceIps?: readonly Address[];
  readonly notSourceIps?: readonly Address[];
  readonly destinationIps?: readonly Address[];
  readonly notDestinationIps?: readonly Address[];
  readonly destinationPorts?: readonly number[];
  readonly notDestinationPorts?: readonly number[];
}

export interface Clause {
  readonly matches: readonly Match[];
}

export interface Rule {
  readonly clauses: readonly Clause[];
}

export interface Authorization {
  readonly name: string;
  readonly namespace: string;
  readonly scope: Scope;
  readonly action: Action;
  readonly rules: readonly Rule[];
  /** Evaluated and reported, never enforced. */
  readonly dryRun: boolean;
}

/** `namespace/name`, the key workloads use to list their selector policies. */
export function policyKey(p: { readonly namespace: string; readonly name: string }): string {
  return `${p.namespace}/${p.name}`;
}

const STRING_MATCH_FIELDS = ['namespaces', 'notNamespaces', 'principals', 'notPrincipals'] as const;
const SA_FIELDS = ['serviceAccounts', 'notServiceAccounts'] as const;
const IP_FIELDS = ['sourceIps', 'notSourceIps', 'destinationIps', 'notDestinationIps'] as const;
const PORT_FIELDS = ['destinationPorts', 'notDestinationPorts'] as const;
const MATCH_FIELDS: ReadonlySet<string> = new Set([
  ...STRING_MATCH_FIELDS,
  ...SA_FIELDS,
  ...IP_FIELDS,
  ...PORT_FIELDS,
]);

/**
 * Checks an Authorization from outside (local YAML config, decoded xDS) and returns it
 * typed, or every reason it is not one, each prefixed with its path.
 */
export function validateAuthorization(input: unknown, path = 'authorization'): Result<Authorization> {
  const reasons: string[] = [];
  if (!isRecord(input)) return err([`${path}: must be an object`]);
  for (const f of ['name', 'namespace'] as const) {
    if (typeof input[f] !== 'string' || input[f] === '')
      reasons.push(`${path}.${f}: must be a non-empty string`);
  }
  if (!SCOPES.includes(input.scope as Scope)) {
    reasons.push(`${path}.scope: must be one of ${SCOPES.join(', ')}, got ${show(input.scope)}`);
  }
  if (!ACTIONS.includes(input.action as Action)) {
    reasons.push(`${path}.action: must be one of ${ACTIONS.join(', ')}, got ${show(input.action)}`);
  }
  if (input.dryRun !== undefined && typeof input.dryRun !== 'boolean') {
    reasons.push(`${path}.dryRun: must be a boolean`);
  }
  eachOf(input.rules, `${path}.rules`, reasons, (rule, rp) => {
    if (!isRecord(rule)) return void reasons.push(`${rp}: must be an object`);
    eachOf(rule.clauses, `${rp}.clauses`, reasons, (clause, cp) => {
      if (!isRecord(clause)) return void reasons.push(`${cp}: must be an object`);
      eachOf(clause.matches, `${cp}.matches`, reasons, (m, mp) => validateMatch(m, mp, reasons));
    });
  });
  if (reasons.length > 0) return err(reasons);
  return ok(normalize(input));
}

/** Absent lists become empty ones, so that evaluation never meets `undefined`. */
function normalize(input: Record<string, unknown>): Authorization {
  type Raw = { clauses?: { matches?: Match[] }[] };
  const rules = ((input.rules ?? []) as Raw[]).map((r) => ({
    clauses: (r.clauses ?? []).map((c) => ({ matches: c.matches ?? [] })),
  }));
  return {
    name: input.name as string,
    namespace: input.namespace as string,
    scope: input.scope as Scope,
    action: input.action as Action,
    rules,
    dryRun: input.dryRun === true,
  };
}

function validateMatch(m: unknown, path: string, reasons: string[]): void {
  if (!isRecord(m)) return void reasons.push(`${path}: must be an object`);
  for (const key of Object.keys(m)) {
    if (!MATCH_FIELDS.has(key)) reasons.push(`${path}.${key}: unknown field`);
  }
  for (const f of STRING_MATCH_FIELDS) {
    eachOf(m[f], `${path}.${f}`, reasons, (s, sp) => validateStringMatch(s, sp, reasons));
  }
  for (const f of SA_FIELDS) {
    eachOf(m[f], `${path}.${f}`, reasons, (s, sp) => {
      if (!isRecord(s) || typeof s.namespace !== 'string' || typeof s.serviceAccount !== 'string') {
        reasons.push(`${sp}: must be {namespace: string, serviceAccount: string}`);
      }
    });
  }
  for (const f of IP_FIELDS) {
    eachOf(m[f], `${path}.${f}`, reasons, (a, ap) => {
      if (!isRecord(a) || typeof a.address !== 'string' || typeof a.length !== 'number') {
        return void reasons.push(`${ap}: must be {address: string, length: number}`);
      }
      const cidr = makeCidr(a.address, a.length);
      if (typeof cidr === 'string') reasons.push(`${ap}: ${cidr}`);
    });
  }
  for (const f of PORT_FIELDS) {
    eachOf(m[f], `${path}.${f}`, reasons, (p, pp) => {
      if (!isPort(p)) reasons.push(`${pp}: port must be an integer in 1..65535, got ${show(p)}`);
    });
  }
}

function validateStringMatch(s: unknown, path: string, reasons: string[]): void {
  if (!isRecord(s)) return void reasons.push(`${path}: must be an object`);
  const kinds = ['exact', 'prefix', 'suffix', 'presence'].filter((k) => s[k] !== undefined);
  if (kinds.length !== 1) {
    return void reasons.push(`${path}: must have exactly one of exact, prefix, suffix, presence`);
  }
  const kind = kinds[0]!;
  if (kind === 'presence' ? !isRecord(s.presence) : typeof s[kind] !== 'string') {
    reasons.push(`${path}.${kind}: must be ${kind === 'presence' ? 'an empty object' : 'a string'}`);
  }
}

function isPort(p: unknown): p is number {
  return typeof p === 'number' && Number.isInteger(p) && p >= 1 && p <= 65535;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Visits each element of an optional array; a present non-array is a reason. */
function eachOf(
  v: unknown,
  path: string,
  reasons: string[],
  visit: (item: unknown, itemPath: string) => void,
): void {
  if (v === undefined || v === null) return;
  if (!Array.isArray(v)) return void reasons.push(`${path}: must be a list`);
  for (let i = 0; i < v.length; i++) visit(v[i], `${path}[${i}]`);
}

export function show(v: unknown): string {
  return v === undefined ? 'nothing' : JSON.stringify(v);
}
