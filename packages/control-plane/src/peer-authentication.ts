import {
  type Authorization,
  type Clause,
  convertedPeerAuthenticationName,
  policyKey,
  type Rule,
  STATIC_STRICT_POLICY_NAME,
  staticStrictPolicy,
} from '@zmesh/shared';
import type { MtlsMode, PeerAuthenticationObject, PodObject } from './k8s-objects.js';

/**
 * PeerAuthentication folded into Authorization, Istio's shape (docs/peer-authentication.md).
 * Precedence: a workload policy (selector) over the namespace's over the mesh's (root
 * namespace); UNSET inherits. Where Istio's default is PERMISSIVE, zmesh's is STRICT: as if
 * the root namespace held a STRICT policy. DISABLE is PERMISSIVE in ambient (ztunnel has no
 * plaintext-only mode). Several candidates at one level: the first by name wins (Istio: the
 * oldest; the store keeps no creation time).
 */
export class PeerAuthentications {
  readonly #byNs = new Map<string, PeerAuthenticationObject[]>();
  readonly #mesh: PeerAuthenticationObject | undefined;
  readonly #converted = new Map<PeerAuthenticationObject, Authorization | undefined>();

  constructor(
    objects: readonly PeerAuthenticationObject[],
    private readonly rootNamespace: string,
  ) {
    const sorted = [...objects].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
    for (const p of sorted) {
      const list = this.#byNs.get(p.metadata.namespace) ?? [];
      list.push(p);
      this.#byNs.set(p.metadata.namespace, list);
    }
    this.#mesh = this.#byNs.get(rootNamespace)?.find((p) => p.spec.selector === undefined);
  }

  /** Every resource served: the static STRICT policy, and each workload policy that needs its own. */
  authorizations(): Authorization[] {
    const out = [staticStrictPolicy(this.rootNamespace)];
    for (const list of this.#byNs.values()) {
      for (const p of list) {
        const converted = this.#convert(p);
        if (converted) out.push(converted);
      }
    }
    return out;
  }

  /** The keys a pod names in `authorization_policies` for its peer authentication. */
  keysFor(pod: PodObject): string[] {
    const ns = pod.metadata.namespace;
    const workload =
      ns === this.rootNamespace
        ? undefined
        : this.#byNs
            .get(ns)
            ?.find((p) => p.spec.selector !== undefined && selects(p.spec.selector, pod.metadata.labels));
    const converted = workload && this.#convert(workload);
    if (converted) return [policyKey(converted)];
    const mode = inherit(workload?.spec.mode, this.#parentMode(ns));
    return mode === 'STRICT' ? [`${this.rootNamespace}/${STATIC_STRICT_POLICY_NAME}`] : [];
  }

  /**
   * The mode in force for a pod and why (`zmesh x describe pod`): the first level that sets a
   * mode, workload (selector) over namespace over mesh (root namespace) over zmesh's STRICT
   * default, by the same precedence `keysFor` serves; port-level modes that differ from it.
   */
  explain(pod: PodObject): PeerAuthExplanation {
    const ns = pod.metadata.namespace;
    const list = ns === this.rootNamespace ? [] : (this.#byNs.get(ns) ?? []);
    const workload = list.find(
      (p) => p.spec.selector !== undefined && selects(p.spec.selector, pod.metadata.labels),
    );
    const namespace = list.find((p) => p.spec.selector === undefined);
    const set = (p: PeerAuthenticationObject | undefined) =>
      p !== undefined && p.spec.mode !== undefined && p.spec.mode !== 'UNSET';
    const name = (p: PeerAuthenticationObject) => `${p.metadata.namespace}/${p.metadata.name}`;
    const written = (p: PeerAuthenticationObject) =>
      p.spec.mode === 'DISABLE' ? ' (DISABLE: plaintext accepted, as PERMISSIVE in ambient)' : '';
    const labels = Object.entries(workload?.spec.selector ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    const mode = inherit(workload?.spec.mode, this.#parentMode(ns));
    const why =
      workload && set(workload)
        ? `PeerAuthentication ${name(workload)} selects the pod (${labels})${written(workload)}`
        : namespace && set(namespace)
          ? `PeerAuthentication ${name(namespace)}: namespace-wide${written(namespace)}`
          : this.#mesh && set(this.#mesh)
            ? `PeerAuthentication ${name(this.#mesh)}: mesh-wide (root namespace ${this.rootNamespace})${written(this.#mesh)}`
            : "no PeerAuthentication sets a mode: zmesh's default (STRICT)";
    const ports: Record<string, MtlsMode> = {};
    for (const [port, m] of Object.entries(workload?.spec.portLevelMtls ?? {})) {
      const effective = inherit(m, mode);
      if (effective !== mode) ports[port] = effective;
    }
    return { mode, why, ports };
  }

  /** The mode a workload in `ns` inherits when its own policy leaves it UNSET. */
  #parentMode(ns: string): MtlsMode {
    const namespace =
      ns === this.rootNamespace ? undefined : this.#byNs.get(ns)?.find((p) => p.spec.selector === undefined);
    return inherit(namespace?.spec.mode, inherit(this.#mesh?.spec.mode, 'STRICT'));
  }

  /**
   * A workload policy with port-level overrides that make its ports differ: one DENY policy
   * for the workloads it selects. Strict base with plaintext ports P: deny when the port is
   * none of P and there is no identity. Plaintext base with strict ports S: deny, for each S,
   * a connection to S with no identity. Undefined when no port differs from the base.
   */
  #convert(p: PeerAuthenticationObject): Authorization | undefined {
    if (!this.#converted.has(p)) this.#converted.set(p, this.#build(p));
    return this.#converted.get(p);
  }

  #build(p: PeerAuthenticationObject): Authorization | undefined {
    if (p.spec.selector === undefined || p.metadata.namespace === this.rootNamespace) return undefined;
    const base = inherit(p.spec.mode, this.#parentMode(p.metadata.namespace));
    const ports = Object.entries(p.spec.portLevelMtls)
      .map(([port, mode]) => ({ port: Number(port), mode: inherit(mode, base) }))
      .filter((e) => (e.mode === 'STRICT') !== (base === 'STRICT'))
      .map((e) => e.port)
      .sort((a, b) => a - b);
    if (ports.length === 0) return undefined;
    const noIdentity: Clause = { matches: [{ notPrincipals: [{ presence: {} }] }] };
    const rules: Rule[] =
      base === 'STRICT'
        ? [
            {
              clauses: [...ports.map((port) => ({ matches: [{ notDestinationPorts: [port] }] })), noIdentity],
            },
          ]
        : ports.map((port) => ({
            clauses: [{ matches: [{ notPrincipals: [{ presence: {} }], destinationPorts: [port] }] }],
          }));
    return {
      name: convertedPeerAuthenticationName(p.metadata.name),
      namespace: p.metadata.namespace,
      scope: 'WORKLOAD_SELECTOR',
      action: 'DENY',
      rules,
      dryRun: false,
    };
  }
}

/** The PeerAuthentication mode in force for a pod, why, and ports that differ from it. */
export interface PeerAuthExplanation {
  mode: MtlsMode;
  why: string;
  ports: Record<string, MtlsMode>;
}

/** STRICT or not: DISABLE accepts plaintext as PERMISSIVE does. */
function inherit(mode: MtlsMode | undefined, parent: MtlsMode): MtlsMode {
  if (mode === undefined || mode === 'UNSET') return parent;
  return mode === 'DISABLE' ? 'PERMISSIVE' : mode;
}

function selects(selector: Record<string, string>, labels: Record<string, string>): boolean {
  const entries = Object.entries(selector);
  return entries.length > 0 && entries.every(([k, v]) => labels[k] === v);
}
