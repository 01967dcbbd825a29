import { missingBackends } from './admission.js';
import type { CompiledConfig } from './compiler.js';
import { objectsOf, type StoreView } from './config-store.js';
import { isWaypointClass } from './k8s-objects.js';

/** One Gateway API route condition, as written in `status.parents[].conditions`. */
export interface RouteCondition {
  type: 'Accepted' | 'ResolvedRefs';
  status: 'True' | 'False';
  reason: string;
  message: string;
}

/** What `GET /route-status` says of one HTTPRoute or GRPCRoute (`zmesh proxy-status`, the object's status). */
export interface RouteStatus {
  kind: 'HTTPRoute' | 'GRPCRoute';
  namespace: string;
  name: string;
  parents: Array<{
    parentRef: { kind: string; namespace: string; name: string; port?: number };
    /** The waypoint (`ns/name`) whose config carries the route for this parent, or null. */
    waypoint: string | null;
    conditions: RouteCondition[];
  }>;
}

type Ref = { kind?: unknown; name?: unknown; namespace?: unknown; port?: unknown };

/**
 * Gateway API's route status, per parentRef, from what the compiler programmed:
 * - Accepted: True when a waypoint's compiled config carries the route for that parent (a
 *   Service that uses a waypoint, GAMMA's binding); False, NoMatchingParent, otherwise (no
 *   such Service, a Service with no waypoint, or a Gateway parentRef: a waypoint takes mesh
 *   routes through their Service).
 * - ResolvedRefs: False, BackendNotFound, naming every backendRef or mirror that names no
 *   Service; the route is still served and the waypoint answers 500 for that share.
 * Pure: the same view and compiled config give the same statuses.
 */
export function routeStatuses(view: StoreView, compiled: CompiledConfig | undefined): RouteStatus[] {
  const services = new Set(
    objectsOf(view, 'Service').map((s) => `${s.metadata.namespace}/${s.metadata.name}`),
  );
  const gateways = new Set(
    objectsOf(view, 'Gateway')
      .filter((g) => isWaypointClass(g.spec.gatewayClassName))
      .map((g) => `${g.metadata.namespace}/${g.metadata.name}`),
  );
  // `Kind/ns/name|parent ns/name` → the waypoint whose config carries the route for that Service.
  const programmed = new Map<string, string>();
  for (const w of compiled?.waypoints ?? []) {
    for (const [kind, list] of [
      ['HTTPRoute', w.config.httpRoutes],
      ['GRPCRoute', w.config.grpcRoutes],
    ] as const) {
      for (const r of (list ?? []) as Array<{ name: string; namespace: string; parentRefs?: Ref[] }>) {
        for (const p of r.parentRefs ?? [])
          programmed.set(
            `${kind}/${r.namespace}/${r.name}|${refNamespace(p, r.namespace)}/${String(p.name)}`,
            w.name,
          );
      }
    }
  }
  const routes = [...objectsOf(view, 'HTTPRoute'), ...objectsOf(view, 'GRPCRoute')];
  return routes.map((r) => {
    const { name, namespace } = r.metadata;
    const spec = (r.raw.spec ?? {}) as { parentRefs?: unknown };
    const parents = (Array.isArray(spec.parentRefs) ? spec.parentRefs : []) as Ref[];
    const missing = missingBackends(r.raw, namespace, services);
    const resolved: RouteCondition =
      missing.length === 0
        ? { type: 'ResolvedRefs', status: 'True', reason: 'ResolvedRefs', message: 'every backend resolved' }
        : {
            type: 'ResolvedRefs',
            status: 'False',
            reason: 'BackendNotFound',
            message: `no Service ${[...new Set(missing.map((m) => m.service))].join(', ')}: requests sent there are answered 500`,
          };
    return {
      kind: r.kind,
      namespace,
      name,
      parents: parents.map((p) => {
        const kind = typeof p.kind === 'string' ? p.kind : 'Service';
        const parent = `${refNamespace(p, namespace)}/${String(p.name)}`;
        const waypoint =
          kind === 'Service' ? programmed.get(`${r.kind}/${namespace}/${name}|${parent}`) : undefined;
        const accepted: RouteCondition = waypoint
          ? {
              type: 'Accepted',
              status: 'True',
              reason: 'Accepted',
              message: `programmed in waypoint ${waypoint}`,
            }
          : {
              type: 'Accepted',
              status: 'False',
              reason: 'NoMatchingParent',
              message:
                kind !== 'Service'
                  ? gateways.has(parent) && kind === 'Gateway'
                    ? `a waypoint takes mesh routes through a Service parentRef (GAMMA), not its Gateway ${parent}`
                    : `parentRef kind ${kind} is not programmed by a waypoint; name a Service`
                  : services.has(parent)
                    ? `Service ${parent} uses no waypoint (istio.io/use-waypoint): nothing programs this route`
                    : `no Service ${parent}`,
            };
        return {
          parentRef: {
            kind,
            namespace: refNamespace(p, namespace),
            name: String(p.name),
            ...(typeof p.port === 'number' ? { port: p.port } : {}),
          },
          waypoint: waypoint ?? null,
          conditions: [accepted, resolved],
        };
      }),
    };
  });
}

function refNamespace(p: Ref, namespace: string): string {
  return typeof p.namespace === 'string' ? p.namespace : namespace;
}
