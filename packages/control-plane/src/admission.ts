import { convertAuthorizationPolicy } from '@zmesh/shared';
import {
  type AuthorizationPolicyObject,
  isWaypointClass,
  type StoreObject,
  USE_WAYPOINT_LABEL,
  WAYPOINT_CLASS,
} from './k8s-objects.js';

/**
 * Admission, like a validating webhook: given every object the store would hold after a
 * change, returns every reason the control plane would not serve them as written, each as
 * `<where>: <path>: <reason>` (where = `file#doc (Kind ns/name)`). Empty: admit. Pure and
 * synchronous, so any store (file, sqlite, etcd) calls it before it commits.
 *
 * It runs the checks serving runs, not copies of them: an AuthorizationPolicy goes through
 * `convertAuthorizationPolicy`, the compiler's own conversion, so a policy that apply admits
 * is a policy the compiler serves; references the compiler resolves (a waypoint named by
 * `istio.io/use-waypoint`, a pod's IPs) must resolve here.
 */
/** `backendRefs: 'status'`: a route's missing backend is left to its status (Kubernetes mode). */
export interface AdmitChecks {
  readonly backendRefs?: 'refuse' | 'status';
}

export function admit(
  objects: ReadonlyMap<string, StoreObject>,
  originOf: (key: string) => string | undefined = () => undefined,
  checks: AdmitChecks = {},
): string[] {
  const reasons: string[] = [];
  const where = (key: string, o: StoreObject) =>
    originOf(key) ?? `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}`;
  const waypoints = new Set<string>();
  const namespaces = new Set<string>();
  const services = new Set<string>();
  for (const o of objects.values()) {
    if (o.kind === 'Namespace') namespaces.add(o.metadata.name);
    if (o.kind === 'Service') services.add(`${o.metadata.namespace}/${o.metadata.name}`);
    if (o.kind === 'Gateway' && isWaypointClass(o.spec.gatewayClassName))
      waypoints.add(`${o.metadata.namespace}/${o.metadata.name}`);
  }
  const ipOwner = new Map<string, string>();
  for (const [key, o] of objects) {
    const at = where(key, o);
    if (o.kind === 'AuthorizationPolicy') {
      for (const r of policyReasons(o)) reasons.push(`${at}: ${r}`);
    }
    if ((o.kind === 'HTTPRoute' || o.kind === 'GRPCRoute') && checks.backendRefs !== 'status')
      for (const r of unresolvedBackendRefs(o.raw, o.metadata.namespace, services))
        reasons.push(`${at}: ${r}`);
    if (o.kind === 'Pod' && !namespaces.has(o.metadata.namespace)) {
      // Its namespace decides ambient enrollment and the waypoint: a pod without one would
      // be served as plaintext, silently out of the mesh.
      reasons.push(`${at}: metadata.namespace: namespace ${o.metadata.namespace} is not in the config`);
    }
    if (o.kind === 'Pod') {
      // Two pods with one IP would make source attribution ambiguous.
      for (const ip of o.status.podIPs) {
        const other = ipOwner.get(ip);
        if (other !== undefined) reasons.push(`${at}: status.podIPs: ${ip} is also the IP of ${other}`);
        else ipOwner.set(ip, key);
      }
    }
    if (o.kind === 'Namespace' || o.kind === 'Pod' || o.kind === 'Service') {
      const name = o.metadata.labels[USE_WAYPOINT_LABEL];
      const ns = o.kind === 'Namespace' ? o.metadata.name : o.metadata.namespace;
      if (name !== undefined && name !== '' && name !== 'none' && !waypoints.has(`${ns}/${name}`)) {
        reasons.push(
          `${at}: metadata.labels.${USE_WAYPOINT_LABEL}: names waypoint ${ns}/${name}, but no Gateway ` +
            `${ns}/${name} with gatewayClassName ${WAYPOINT_CLASS} is in the config`,
        );
      }
    }
  }
  return reasons;
}

/**
 * Gateway API ResolvedRefs: a backendRef (or a RequestMirror's) that names no Service is
 * BackendNotFound. Gateway API would accept the route and answer 500 for that share of its
 * traffic (the waypoint does, for config that reaches it another way); apply refuses it
 * instead, so the mistake is seen when it is made. Route-kind neutral: reads spec.rules.
 */
function unresolvedBackendRefs(
  raw: Record<string, unknown>,
  namespace: string,
  services: ReadonlySet<string>,
): string[] {
  return missingBackends(raw, namespace, services).map(
    (m) => `${m.path}: BackendNotFound: no Service ${m.service} (Gateway API ResolvedRefs=False)`,
  );
}

/**
 * A route's backendRefs and RequestMirror backends that name no Service (`ns/name`), with
 * where each is written: admission's refusal in file mode, the route's ResolvedRefs=False
 * (BackendNotFound) status in Kubernetes mode and in proxy-status (route-status.ts).
 */
export function missingBackends(
  raw: Record<string, unknown>,
  namespace: string,
  services: ReadonlySet<string>,
): Array<{ path: string; service: string }> {
  const spec = (raw.spec ?? {}) as { rules?: unknown };
  const rules = Array.isArray(spec.rules) ? (spec.rules as Array<Record<string, unknown>>) : [];
  const out: Array<{ path: string; service: string }> = [];
  const check = (ref: unknown, path: string) => {
    if (!ref || typeof ref !== 'object') return;
    const { kind, name, namespace: ns } = ref as Record<string, unknown>;
    if (kind !== undefined && kind !== 'Service') return; // the waypoint's decoder refuses other kinds
    if (typeof name !== 'string') return;
    const key = `${typeof ns === 'string' ? ns : namespace}/${name}`;
    if (!services.has(key)) out.push({ path, service: key });
  };
  rules.forEach((rule, i) => {
    if (!rule || typeof rule !== 'object') return;
    const refs = Array.isArray(rule.backendRefs) ? rule.backendRefs : [];
    refs.forEach((b, j) => {
      check(b, `spec.rules[${i}].backendRefs[${j}]`);
    });
    const filters = Array.isArray(rule.filters) ? rule.filters : [];
    filters.forEach((f, j) => {
      const mirror = (f as { requestMirror?: { backendRef?: unknown } } | null)?.requestMirror;
      check(mirror?.backendRef, `spec.rules[${i}].filters[${j}].requestMirror.backendRef`);
    });
  });
  return out;
}

/** Store objects are immutable and shared between views: each policy is converted once. */
const converted = new WeakMap<AuthorizationPolicyObject, readonly string[]>();

function policyReasons(p: AuthorizationPolicyObject): readonly string[] {
  let reasons = converted.get(p);
  if (reasons === undefined) {
    const result = convertAuthorizationPolicy(p.raw);
    reasons = result.ok ? [] : result.error;
    converted.set(p, reasons);
  }
  return reasons;
}

/** The waypoint config's route lists, by the store kind their entries came from. */
const ROUTE_KINDS: Record<string, string> = { httpRoutes: 'HTTPRoute', grpcRoutes: 'GRPCRoute' };

/** Checks one compiled waypoint config as the waypoint will (its own decoder): reasons `path: reason`. */
export type WaypointValidator = (config: Record<string, unknown>) => readonly string[];

/**
 * Admission for what the waypoint validates itself: each waypoint's compiled config goes
 * through the waypoint's decoder (the control-plane daemon wires `decodeWaypointConfig`),
 * and each reason is put on the object it came from — `httpRoutes[i]` on that HTTPRoute,
 * `grpcRoutes[i]` on that GRPCRoute,
 * `authorizationPolicies[i]` on that AuthorizationPolicy (their `spec` fields pass through
 * as written), anything else on the Gateway.
 */
export function admitWaypointConfigs(
  waypoints: ReadonlyArray<{ name: string; config: Record<string, unknown> }>,
  validate: WaypointValidator,
  originOf: (key: string) => string | undefined,
): string[] {
  const out = new Set<string>();
  for (const w of waypoints) {
    const [namespace = '', gateway = ''] = w.name.split('/');
    for (const reason of validate(w.config)) {
      const m = /^(httpRoutes|grpcRoutes|authorizationPolicies)\[(\d+)\]\.(.*)$/s.exec(reason);
      const list = m ? (w.config[m[1] as string] as Array<{ name?: string; namespace?: string }>) : undefined;
      const entry = m ? list?.[Number(m[2])] : undefined;
      if (m && entry?.name !== undefined) {
        const kind = ROUTE_KINDS[m[1] as string] ?? 'AuthorizationPolicy';
        const key = `${kind}/${entry.namespace ?? namespace}/${entry.name}`;
        const rest = (m[3] as string).replace(/^(rules|hostnames|parentRefs|targetRefs|action)/, 'spec.$1');
        out.add(`${originOf(key) ?? key}: ${rest} (as waypoint ${w.name} reads it)`);
      } else {
        const key = `Gateway/${namespace}/${gateway}`;
        out.add(`${originOf(key) ?? key}: waypoint config: ${reason}`);
      }
    }
  }
  return [...out];
}
