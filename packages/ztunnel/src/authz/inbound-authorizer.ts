import {
  err,
  logger,
  ok,
  policyKey,
  type Result,
  STATIC_STRICT_POLICY_NAME,
  type Workload,
  ZmeshError,
} from '@zmesh/shared';
import { Counter, type Registry } from 'prom-client';
import { RefusalLog } from '../tenancy/refusal-log.js';
import { AuthorizationStore, type Decision } from './authorization-store.js';
import type { ConnectionAttributes } from './policy-match.js';

const log = logger('authz');

/**
 * Distinct `policy` label values of zmesh_authz_missing_policy_denials_total; later ones
 * count under `other`. Policy names come from config, so an unbounded label would let a
 * bad config grow the metrics without end.
 */
export const MAX_MISSING_POLICY_LABELS = 32;

/**
 * Authorization's own validity through a control-plane outage (docs/design.md §5): policies are
 * last-known-good until `ageMs()` exceeds `maxMs()`; past that, new connections to a
 * destination with an applicable non-dry-run policy are refused. Live connections are not
 * closed for staleness alone: nothing new has been learned against them.
 */
export interface AuthzStaleness {
  ageMs: () => number;
  maxMs: () => number;
}

interface LiveConnection {
  attributes: ConnectionAttributes;
  workloadUid: string;
  close: (reason: ZmeshError) => void;
}

/**
 * L4 authorization at the destination (Istio semantics, evaluated by AuthorizationStore),
 * plus the set of live inbound connections, so that a policy change closes connections
 * it now denies instead of letting them run on under the old verdict.
 */
export class InboundAuthorizer {
  readonly store = new AuthorizationStore();
  private readonly live = new Set<LiveConnection>();
  private readonly decisions: Counter<'decision' | 'reason'>;
  private readonly closedLive: Counter;
  private readonly dryRuns: Counter<'policy' | 'would_be'>;
  private readonly missingPolicy: Counter<'policy'>;
  private readonly missingLabels = new Set<string>();
  private readonly missingLog = new RefusalLog(undefined, undefined, log);
  private staleness: AuthzStaleness | undefined;

  constructor(
    registry: Registry,
    private readonly workload: (uid: string) => Workload | undefined,
  ) {
    this.decisions = new Counter({
      name: 'zmesh_authz_decisions_total',
      help: 'L4 authorization decisions at the destination',
      labelNames: ['decision', 'reason'],
      registers: [registry],
    });
    this.closedLive = new Counter({
      name: 'zmesh_authz_live_connections_closed_total',
      help: 'Live connections closed because a policy change now denies them',
      registers: [registry],
    });
    this.dryRuns = new Counter({
      name: 'zmesh_authz_dry_run_total',
      help: 'Would-be decisions of dry-run policies (never enforced)',
      labelNames: ['policy', 'would_be'],
      registers: [registry],
    });
    this.missingPolicy = new Counter({
      name: 'zmesh_authz_missing_policy_denials_total',
      help: `Connections denied because the destination names a policy this ztunnel does not have (fail closed); the first ${MAX_MISSING_POLICY_LABELS} policies by name, then other`,
      labelNames: ['policy'],
      registers: [registry],
    });
  }

  /** Replaces the whole policy set; an invalid set changes nothing and returns every reason. */
  replacePolicies(policies: readonly unknown[]): Result<number> {
    const keep = new Set(
      policies.flatMap((p) => {
        const o = p as { namespace?: unknown; name?: unknown };
        return typeof o?.namespace === 'string' && typeof o?.name === 'string'
          ? [policyKey(o as { namespace: string; name: string })]
          : [];
      }),
    );
    const removals = this.store
      .list()
      .map(policyKey)
      .filter((k) => !keep.has(k));
    const before = this.store.version;
    const applied = this.store.apply(policies, removals);
    if (!applied.ok) return err(applied.error);
    if (applied.value !== before) setImmediate(() => this.reevaluate());
    return ok(applied.value);
  }

  /** Set once the config source is known (the control plane); without it policies never go stale. */
  setStaleness(staleness: AuthzStaleness | undefined): void {
    this.staleness = staleness;
  }

  /** Why policies for `workload` are too stale to admit a new connection, if they are. */
  staleDenial(workload: Workload): ZmeshError | undefined {
    if (!this.staleness) return undefined;
    const age = this.staleness.ageMs();
    const max = this.staleness.maxMs();
    if (age <= max) return undefined;
    const dest = { namespace: workload.namespace, policyNames: workload.authorizationPolicies };
    if (!this.store.hasEnforcedPolicy(dest)) return undefined;
    return new ZmeshError('ZM_ERR_AUTHZ_STALE', {
      workload: workload.uid,
      ageSeconds: Math.round(age / 1000),
      maxSeconds: Math.round(max / 1000),
    });
  }

  /**
   * Whether plaintext may reach `workload` at all (docs/peer-authentication.md): the control plane
   * serves PeerAuthentication (the static STRICT policy exists) and the workload does not name
   * that policy, i.e. some port is not STRICT. Without the control plane's word, STRICT.
   */
  acceptsPlaintext(workload: Workload): boolean {
    const key = `${this.store.rootNamespace}/${STATIC_STRICT_POLICY_NAME}`;
    return this.store.get(key) !== undefined && !(workload.authorizationPolicies ?? []).includes(key);
  }

  /** Decides one new connection; a denial is a ZmeshError (401 on HBONE). */
  check(workload: Workload, attributes: ConnectionAttributes): ZmeshError | undefined {
    const stale = this.staleDenial(workload);
    if (stale) {
      this.decisions.inc({ decision: 'deny', reason: 'stale-policy' });
      return stale;
    }
    return this.checkPolicy(workload, attributes);
  }

  private checkPolicy(workload: Workload, attributes: ConnectionAttributes): ZmeshError | undefined {
    const decision = this.evaluate(workload, attributes);
    if (decision.allowed) return undefined;
    return new ZmeshError('ZM_ERR_AUTHZ_DENIED', { policy: decision.policy ?? decision.reason });
  }

  /** Tracks an admitted connection until `release` is called. */
  track(
    workload: Workload,
    attributes: ConnectionAttributes,
    close: (reason: ZmeshError) => void,
  ): () => void {
    const entry: LiveConnection = { attributes, workloadUid: workload.uid, close };
    this.live.add(entry);
    return () => this.live.delete(entry);
  }

  liveCount(): number {
    return this.live.size;
  }

  /** Re-decides every live connection against the current policies and workload. */
  reevaluate(): void {
    for (const entry of [...this.live]) {
      const workload = this.workload(entry.workloadUid);
      const denial = workload
        ? this.checkPolicy(workload, entry.attributes)
        : new ZmeshError('ZM_ERR_HBONE_NOT_SERVING', { workload: entry.workloadUid });
      if (!denial) continue;
      this.live.delete(entry);
      this.closedLive.inc();
      log.warn(
        { dst: entry.workloadUid, src: entry.attributes.sourcePrincipal, err: denial.message },
        'live connection closed by policy change',
      );
      entry.close(denial);
    }
  }

  private evaluate(workload: Workload, attributes: ConnectionAttributes): Decision {
    const decision = this.store.evaluate(attributes, {
      namespace: workload.namespace,
      policyNames: workload.authorizationPolicies,
    });
    this.decisions.inc({ decision: decision.allowed ? 'allow' : 'deny', reason: decision.reason });
    if (decision.reason === 'policy-pending') this.#missing(decision.policy ?? '', workload, attributes);
    for (const d of decision.dryRun) {
      this.dryRuns.inc({ policy: d.policy, would_be: d.wouldBe });
      log.info(
        { policy: d.policy, wouldBe: d.wouldBe, src: attributes.sourcePrincipal, dst: workload.uid },
        'dry-run decision',
      );
    }
    return decision;
  }

  /**
   * A destination names a policy this ztunnel was never served (the control plane refused
   * or has not sent it): the connection is denied, fail closed, and the policy is named, in
   * a log line (at most one per policy per interval) and in a bounded metric label.
   */
  #missing(policy: string, workload: Workload, attributes: ConnectionAttributes): void {
    if (this.missingLabels.size < MAX_MISSING_POLICY_LABELS) this.missingLabels.add(policy);
    this.missingPolicy.inc({ policy: this.missingLabels.has(policy) ? policy : 'other' });
    this.missingLog.refused(
      policy,
      'missing-policy',
      { policy, dst: workload.uid, src: attributes.sourcePrincipal },
      'connection denied: the destination names an AuthorizationPolicy this ztunnel has not received (check proxy-status and the control plane log)',
    );
  }
}
