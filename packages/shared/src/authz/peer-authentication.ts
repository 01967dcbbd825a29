import type { Authorization } from './policy-model.js';

/**
 * PeerAuthentication folded into workload xDS Authorization resources, as Istio's control
 * plane does for ambient (pilot/pkg/serviceregistry/kube/controller/ambient, authorization.go):
 * a workload whose effective mode is STRICT names the static STRICT policy, a DENY of every
 * connection without a peer identity; a workload policy with port-level overrides becomes
 * its own DENY policy, `converted_peer_authentication_<name>`. The `_` makes both names
 * impossible for a Kubernetes object, so no AuthorizationPolicy can collide with them.
 */
export const STATIC_STRICT_POLICY_NAME = 'istio_converted_static_strict';
const CONVERTED_PREFIX = 'converted_peer_authentication_';

export function convertedPeerAuthenticationName(name: string): string {
  return `${CONVERTED_PREFIX}${name}`;
}

/** Whether a policy is PeerAuthentication folded into Authorization (not an AuthorizationPolicy). */
export function isPeerAuthenticationPolicy(name: string): boolean {
  return name === STATIC_STRICT_POLICY_NAME || name.startsWith(CONVERTED_PREFIX);
}

/** Deny whatever has no peer identity: a plaintext connection (Istio's static STRICT policy). */
export function staticStrictPolicy(rootNamespace: string): Authorization {
  return {
    name: STATIC_STRICT_POLICY_NAME,
    namespace: rootNamespace,
    scope: 'WORKLOAD_SELECTOR',
    action: 'DENY',
    rules: [{ clauses: [{ matches: [{ notPrincipals: [{ presence: {} }] }] }] }],
    dryRun: false,
  };
}
