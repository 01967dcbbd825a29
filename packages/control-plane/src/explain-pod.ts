import type { CompiledConfig } from './compiler.js';
import type { PodObject } from './k8s-objects.js';
import type { PeerAuthExplanation, PeerAuthentications } from './peer-authentication.js';

/** One L7 policy a waypoint enforces for the pod's traffic, and why it applies. */
export interface L7PolicyApplied {
  /** The waypoint (`ns/name`) whose config carries it. */
  waypoint: string;
  kind: 'AuthorizationPolicy' | 'RequestAuthentication';
  namespace: string;
  name: string;
  /** ALLOW, DENY, AUDIT for an AuthorizationPolicy; JWT for a RequestAuthentication. */
  action: string;
  why: string;
}

/** `GET /explain/pod?namespace=&name=`: what the control plane decides for one pod. */
export interface PodExplanation {
  peerAuthentication: PeerAuthExplanation;
  /** The waypoints in the pod's path: its own (istio.io/use-waypoint), and those of the Services it backs. */
  waypoints: string[];
  l7Policies: L7PolicyApplied[];
}

type Ref = { kind?: unknown; name?: unknown };
type Entry = { name: string; namespace: string; action?: unknown; targetRefs?: Ref[] };

/**
 * The L7 half of `zmesh x describe pod` (the L4 half is the pod's ztunnel's own answer):
 * from the compiled config, the waypoints the pod's traffic crosses and, in each, the
 * AuthorizationPolicies and RequestAuthentications it carries that bear on the pod — those
 * whose targetRef is that waypoint's Gateway (every request it carries) or a Service the pod
 * backs (requests addressed to that Service). A waypoint takes no selector policies: those
 * are ztunnel's, L4 (with L7 attributes they fail closed there). Also the PeerAuthentication
 * mode in force, with the level that set it.
 */
export function explainPod(
  pod: PodObject,
  compiled: CompiledConfig | undefined,
  peerAuth: PeerAuthentications,
): PodExplanation {
  const { namespace, name } = pod.metadata;
  const workload = compiled?.workloads.find((w) => w.namespace === namespace && w.name === name);
  const waypointKey = (hostname: string, ns: string) => `${ns}/${hostname.split('.')[0]}`;
  const backed = (compiled?.services ?? []).filter((s) =>
    Object.hasOwn(workload?.services ?? {}, `${s.namespace}/${s.hostname}`),
  );
  const own = workload?.waypoint?.hostname;
  const waypoints = new Set<string>(own ? [waypointKey(own.hostname, own.namespace)] : []);
  for (const s of backed) {
    const h = s.waypoint?.hostname;
    if (h) waypoints.add(waypointKey(h.hostname, h.namespace));
  }
  const l7Policies: L7PolicyApplied[] = [];
  for (const w of compiled?.waypoints ?? []) {
    if (!waypoints.has(w.name)) continue;
    const [wpNs, gateway] = w.name.split('/') as [string, string];
    // The Services the pod backs whose traffic this waypoint carries.
    const via = new Set(
      backed
        .filter((s) => {
          const h = s.waypoint?.hostname;
          return h !== undefined && waypointKey(h.hostname, h.namespace) === w.name;
        })
        .map((s) => `${s.namespace}/${s.name}`),
    );
    const why = (e: Entry): string | undefined => {
      for (const t of e.targetRefs ?? []) {
        if (t.kind === 'Gateway' && t.name === gateway && e.namespace === wpNs)
          return `targetRef Gateway ${w.name}: every request this waypoint carries`;
        if (t.kind === 'Service' && via.has(`${e.namespace}/${String(t.name)}`))
          return `targetRef Service ${e.namespace}/${String(t.name)}, which the pod backs: requests addressed to it`;
      }
      return undefined;
    };
    const config = w.config as { authorizationPolicies?: Entry[]; requestAuthentications?: Entry[] };
    for (const [kind, list] of [
      ['AuthorizationPolicy', config.authorizationPolicies ?? []],
      ['RequestAuthentication', config.requestAuthentications ?? []],
    ] as const) {
      for (const e of list) {
        const reason = why(e);
        if (reason === undefined) continue;
        l7Policies.push({
          waypoint: w.name,
          kind,
          namespace: e.namespace,
          name: e.name,
          action: kind === 'RequestAuthentication' ? 'JWT' : String(e.action ?? 'ALLOW'),
          why: reason,
        });
      }
    }
  }
  return { peerAuthentication: peerAuth.explain(pod), waypoints: [...waypoints].sort(), l7Policies };
}
