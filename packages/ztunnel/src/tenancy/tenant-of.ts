/** Workload label that moves a workload into a tenant other than its namespace. */
export const TENANT_LABEL = 'zmesh.io/tenant';

/**
 * The scheduler's reserved lane for control traffic (xDS, CA, readiness, admin, metrics).
 * No workload may claim it, so names starting with `__` are never taken from a label.
 */
export const CONTROL_TENANT = '__control';

// Kubernetes label values: at most 63 characters, alphanumeric at both ends, `-_.` inside.
const LABEL_VALUE = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/;

export interface TenantSource {
  readonly namespace: string;
  readonly labels?: Readonly<Record<string, string>>;
}

/**
 * A tenant is the workload's namespace unless its `zmesh.io/tenant` label names another
 * one (docs/design.md §7). A malformed label falls back to the namespace rather than failing:
 * attribution must never leave a workload without a tenant.
 */
export function tenantOf(workload: TenantSource): string {
  const label = workload.labels?.[TENANT_LABEL];
  if (label !== undefined && LABEL_VALUE.test(label)) return label;
  return workload.namespace;
}
