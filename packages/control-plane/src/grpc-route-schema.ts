import { GRPCRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/GRPCRoute';

/**
 * GRPCRoute's OpenAPI schema (gateway.networking.k8s.io/v1, from kubernetes-models): types,
 * enums, bounds and list limits, as the API server would check them before any controller
 * sees the object. Reasons `spec.rules[0].backendRefs[0].weight: must be >= 0`. What the
 * schema cannot say (CEL rules such as "service or method") the waypoint's own reader
 * checks in the same admission (`admitWaypointConfigs`).
 */
export function grpcRouteSchemaReasons(doc: Record<string, unknown>): string[] {
  const { apiVersion: _a, kind: _k, status: _s, ...rest } = doc;
  try {
    new GRPCRoute(rest as ConstructorParameters<typeof GRPCRoute>[0]).validate();
    return [];
  } catch (e) {
    const errors = (e as { errors?: Array<{ instancePath?: string; message?: string }> }).errors;
    if (!Array.isArray(errors) || errors.length === 0) return [`spec: ${(e as Error).message}`];
    return errors.map((x) => `${fieldPath(x.instancePath ?? '')}: ${x.message ?? 'invalid'}`);
  }
}

/** `/spec/rules/0/matches` → `spec.rules[0].matches`. */
function fieldPath(pointer: string): string {
  const parts = pointer.split('/').filter(Boolean);
  if (parts.length === 0) return 'spec';
  return parts
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((out, p) => (/^\d+$/.test(p) ? `${out}[${p}]` : out ? `${out}.${p}` : p), '');
}
