import {
  type Authorization,
  err,
  isPeerAuthenticationPolicy,
  ok,
  policyKey,
  type Result,
  validateAuthorization,
  ZmeshError,
} from '@zmesh/shared';
import {
  type CompiledPolicy,
  type ConnectionAttributes,
  compilePolicy,
  policyMatches,
  type Subject,
  toSubject,
} from './policy-match.js';

/** The destination workload: its namespace and its selector policies (`namespace/name`). */
export interface AuthzDestination {
  readonly namespace: string;
  /** As Istio's Workload.authorization_policies. */
  readonly policyNames: readonly string[];
}

/**
 * Why a decision was made. Beyond Istio's four outcomes, two fail closed:
 * `policy-pending` (the workload names a policy this store has not received — ztunnel
 * skips it, but docs/design.md §5 says traffic needing a missing piece fails closed) and
 * `invalid-request` (an address that does not parse; never guess at a match).
 */
export type DecisionReason =
  | 'deny-matched'
  | 'allow-matched'
  | 'no-allow-policies'
  | 'allow-not-matched'
  | 'policy-pending'
  | 'invalid-request';

export interface DryRunVerdict {
  readonly policy: string;
  /** The decision this connection would get if this one policy were enforced too. */
  readonly wouldBe: 'allow' | 'deny';
}

export interface Decision {
  readonly allowed: boolean;
  /** `namespace/name` of the policy that decided, when one did. */
  readonly policy?: string;
  readonly reason: DecisionReason;
  readonly dryRun: readonly DryRunVerdict[];
}

export interface AuthorizationStoreOptions {
  /** Namespace-scoped policies here are mesh-wide, as Istio's root namespace. Default istio-system. */
  readonly rootNamespace?: string;
}

/** Bucket id of mesh-wide policies; '' is not a valid Kubernetes namespace, so it cannot clash. */
const GLOBAL = '';
const NONE: readonly CompiledPolicy[] = [];

/**
 * Holds L4 policies indexed so that a decision looks only at what applies to the
 * destination: the global bucket, the destination namespace's bucket, and the policies
 * the workload names. Updates are validated in full before anything changes.
 */
export class AuthorizationStore {
  readonly rootNamespace: string;
  readonly #byKey = new Map<string, CompiledPolicy>();
  /** bucket → key → policy; the arrays in #lists are rebuilt from it per changed bucket. */
  readonly #members = new Map<string, Map<string, CompiledPolicy>>();
  readonly #lists = new Map<string, readonly CompiledPolicy[]>();
  #version = 0;

  constructor(options: AuthorizationStoreOptions = {}) {
    this.rootNamespace = options.rootNamespace ?? 'istio-system';
  }

  /** Increases on every change that took effect; live connections re-evaluate when it moves. */
  get version(): number {
    return this.#version;
  }

  get size(): number {
    return this.#byKey.size;
  }

  get(key: string): Authorization | undefined {
    return this.#byKey.get(key)?.source;
  }

  list(): Authorization[] {
    return [...this.#byKey.values()].map((p) => p.source);
  }

  /**
   * Upserts and removes (by `namespace/name`) in one step: if any upsert is invalid,
   * nothing changes and every reason is returned (for a NACK). Removing an unknown key is
   * not an error (delta xDS may repeat removals). Returns the new version.
   */
  apply(upserts: readonly unknown[], removals: readonly string[] = []): Result<number> {
    const reasons: string[] = [];
    const compiled: CompiledPolicy[] = [];
    const seen = new Set<string>();
    for (let i = 0; i < upserts.length; i++) {
      const v = validateAuthorization(upserts[i], `upserts[${i}]`);
      if (!v.ok) {
        reasons.push(...v.error);
        continue;
      }
      const key = policyKey(v.value);
      if (seen.has(key)) reasons.push(`upserts[${i}]: ${key} appears more than once`);
      seen.add(key);
      compiled.push(compilePolicy(v.value));
    }
    removals.forEach((r, i) => {
      if (typeof r !== 'string') reasons.push(`removals[${i}]: must be a string`);
      else if (seen.has(r)) reasons.push(`removals[${i}]: ${r} is also upserted`);
    });
    if (reasons.length > 0) return err(reasons);
    const dirty = new Set<string>();
    let changed = compiled.length > 0;
    for (const key of removals) changed = this.#remove(key, dirty) || changed;
    for (const p of compiled) {
      this.#remove(p.key, dirty);
      this.#insert(p, dirty);
    }
    for (const b of dirty) this.#rebuild(b);
    if (changed) this.#version++;
    return ok(this.#version);
  }

  evaluate(conn: ConnectionAttributes, dest: AuthzDestination): Decision {
    const subject = toSubject(conn);
    if (subject === undefined) return { allowed: false, reason: 'invalid-request', dryRun: [] };
    const selected = this.#selected(dest);
    if (typeof selected === 'string')
      return { allowed: false, policy: selected, reason: 'policy-pending', dryRun: [] };
    const lists = [this.#namespaceList(dest.namespace), this.#lists.get(GLOBAL) ?? NONE, selected];
    return decide(lists, subject);
  }

  /**
   * Whether any enforced (not dry-run) policy applies to the destination, or one it names
   * is missing: past the maximum config staleness, new connections to such destinations
   * fail closed (docs/design.md §5).
   */
  hasEnforcedPolicy(dest: AuthzDestination): boolean {
    const selected = this.#selected(dest);
    if (typeof selected === 'string') return true;
    const lists = [this.#namespaceList(dest.namespace), this.#lists.get(GLOBAL) ?? NONE, selected];
    // Peer authentication only ever denies plaintext: it is no reason to fail closed on HBONE.
    return lists.some((l) => l.some((p) => !p.dryRun && !isPeerAuthenticationPolicy(p.source.name)));
  }

  /**
   * The workload's own policies not already in its namespace or the global bucket (ztunnel
   * evaluates namespace, global, then workload policies), or the first name not received.
   */
  #selected(dest: AuthzDestination): readonly CompiledPolicy[] | string {
    if (dest.policyNames.length === 0) return NONE;
    const out: CompiledPolicy[] = [];
    for (const name of dest.policyNames) {
      const p = this.#byKey.get(name);
      if (p === undefined) return name;
      const bucket = this.#bucketOf(p);
      if (bucket !== GLOBAL && bucket !== dest.namespace) out.push(p);
    }
    return out;
  }

  /** '' names the global bucket internally; no workload lives in namespace ''. */
  #namespaceList(namespace: string): readonly CompiledPolicy[] {
    return namespace === GLOBAL ? NONE : (this.#lists.get(namespace) ?? NONE);
  }

  #bucketOf(p: CompiledPolicy): string | undefined {
    if (p.scope === 'GLOBAL') return GLOBAL;
    if (p.scope === 'NAMESPACE') return p.namespace === this.rootNamespace ? GLOBAL : p.namespace;
    return undefined;
  }

  #remove(key: string, dirty: Set<string>): boolean {
    const old = this.#byKey.get(key);
    if (old === undefined) return false;
    this.#byKey.delete(key);
    const bucket = this.#bucketOf(old);
    if (bucket !== undefined) {
      this.#members.get(bucket)?.delete(key);
      dirty.add(bucket);
    }
    return true;
  }

  #insert(p: CompiledPolicy, dirty: Set<string>): void {
    this.#byKey.set(p.key, p);
    const bucket = this.#bucketOf(p);
    if (bucket === undefined) return;
    let members = this.#members.get(bucket);
    if (members === undefined) {
      members = new Map();
      this.#members.set(bucket, members);
    }
    members.set(p.key, p);
    dirty.add(bucket);
  }

  #rebuild(bucket: string): void {
    const members = this.#members.get(bucket);
    if (members === undefined || members.size === 0) {
      this.#members.delete(bucket);
      this.#lists.delete(bucket);
    } else {
      this.#lists.set(bucket, [...members.values()]);
    }
  }
}

/**
 * Istio's order: any matching DENY denies; with no ALLOW policy, allow; any matching
 * ALLOW allows; otherwise deny. Dry-run policies never take part in the decision.
 * `lists` are walked in place (no concatenation): this is the per-connection hot path.
 */
function decide(lists: readonly (readonly CompiledPolicy[])[], s: Subject): Decision {
  let denyBy: string | undefined;
  let allowBy: string | undefined;
  let allowCount = 0;
  let dryCount = 0;
  for (const list of lists) {
    for (const p of list) {
      if (p.dryRun) dryCount++;
      else if (p.action === 'DENY' && denyBy === undefined && policyMatches(p, s)) denyBy = p.key;
    }
  }
  if (denyBy === undefined) {
    for (const list of lists) {
      for (const p of list) {
        if (p.dryRun || p.action !== 'ALLOW') continue;
        allowCount++;
        if (allowBy === undefined && policyMatches(p, s)) allowBy = p.key;
      }
    }
  }
  const base: Omit<Decision, 'dryRun'> =
    denyBy !== undefined
      ? { allowed: false, policy: denyBy, reason: 'deny-matched' }
      : allowCount === 0
        ? { allowed: true, reason: 'no-allow-policies' }
        : allowBy !== undefined
          ? { allowed: true, policy: allowBy, reason: 'allow-matched' }
          : { allowed: false, reason: 'allow-not-matched' };
  const dryRun: DryRunVerdict[] = [];
  if (dryCount > 0) {
    for (const list of lists) {
      for (const p of list) if (p.dryRun) dryRun.push(dryVerdict(p, s, base, allowCount > 0));
    }
  }
  return { ...base, dryRun };
}

function dryVerdict(
  p: CompiledPolicy,
  s: Subject,
  base: Omit<Decision, 'dryRun'>,
  hadAllows: boolean,
): DryRunVerdict {
  let allowed: boolean;
  if (base.reason === 'deny-matched') allowed = false;
  else if (p.action === 'DENY') allowed = base.allowed && !policyMatches(p, s);
  else if (policyMatches(p, s)) allowed = true;
  else allowed = hadAllows && base.allowed;
  return { policy: p.key, wouldBe: allowed ? 'allow' : 'deny' };
}

/** The error a denied connection answers with (HTTP 401 on CONNECT, flag UAEX). */
export function decisionError(d: Decision): ZmeshError | undefined {
  if (d.allowed) return undefined;
  return new ZmeshError('ZM_ERR_AUTHZ_DENIED', { policy: d.policy ?? `(${d.reason})`, reason: d.reason });
}
