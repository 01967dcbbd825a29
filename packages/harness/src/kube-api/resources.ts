/** The resource types the API-server double serves: one row each, nothing per-type in the server. */
export interface ResourceType {
  /** '' for the core group. */
  group: string;
  version: string;
  /** Plural, lower case, as in the URL. */
  resource: string;
  kind: string;
  namespaced: boolean;
  /** Has a `status` subresource: the main PUT keeps status, `/status` changes only status. */
  status: boolean;
  /** A custom resource: list items keep apiVersion and kind, as the API server serves them. */
  custom?: boolean;
  /** Field selectors beyond metadata.name and metadata.namespace. */
  fields?: readonly string[];
}

const core = (resource: string, kind: string, namespaced: boolean, status: boolean): ResourceType => ({
  group: '',
  version: 'v1',
  resource,
  kind,
  namespaced,
  status,
});

export const DEFAULT_RESOURCES: readonly ResourceType[] = [
  core('namespaces', 'Namespace', false, true),
  {
    ...core('pods', 'Pod', true, true),
    fields: ['spec.nodeName', 'spec.serviceAccountName', 'status.phase'],
  },
  core('services', 'Service', true, true),
  core('serviceaccounts', 'ServiceAccount', true, false),
  core('configmaps', 'ConfigMap', true, false),
  core('secrets', 'Secret', true, false),
  {
    group: 'discovery.k8s.io',
    version: 'v1',
    resource: 'endpointslices',
    kind: 'EndpointSlice',
    namespaced: true,
    status: false,
  },
  {
    group: 'apps',
    version: 'v1',
    resource: 'deployments',
    kind: 'Deployment',
    namespaced: true,
    status: true,
  },
  { group: 'apps', version: 'v1', resource: 'daemonsets', kind: 'DaemonSet', namespaced: true, status: true },
  {
    group: 'policy',
    version: 'v1',
    resource: 'poddisruptionbudgets',
    kind: 'PodDisruptionBudget',
    namespaced: true,
    status: true,
  },
  {
    group: 'coordination.k8s.io',
    version: 'v1',
    resource: 'leases',
    kind: 'Lease',
    namespaced: true,
    status: false,
  },
  ...(
    [
      ['clusterroles', 'ClusterRole', false],
      ['clusterrolebindings', 'ClusterRoleBinding', false],
      ['roles', 'Role', true],
      ['rolebindings', 'RoleBinding', true],
    ] as const
  ).map(([resource, kind, namespaced]) => ({
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    resource,
    kind,
    namespaced,
    status: false,
  })),
  {
    group: 'security.istio.io',
    version: 'v1',
    resource: 'authorizationpolicies',
    kind: 'AuthorizationPolicy',
    namespaced: true,
    status: true,
    custom: true,
  },
  ...(
    [
      ['gatewayclasses', 'GatewayClass', false],
      ['gateways', 'Gateway', true],
      ['httproutes', 'HTTPRoute', true],
      ['grpcroutes', 'GRPCRoute', true],
    ] as const
  ).map(([resource, kind, namespaced]) => ({
    group: 'gateway.networking.k8s.io',
    version: 'v1',
    resource,
    kind,
    namespaced,
    status: true,
    custom: true,
  })),
];

export function apiVersionOf(t: ResourceType): string {
  return t.group === '' ? t.version : `${t.group}/${t.version}`;
}

/** The store's key for a type: `group/version/resource`. */
export function typeKey(t: Pick<ResourceType, 'group' | 'version' | 'resource'>): string {
  return `${t.group}/${t.version}/${t.resource}`;
}

/** An object as the double stores it: any fields, with the metadata it reads. */
export type KubeObject = Record<string, unknown> & {
  apiVersion?: string;
  kind?: string;
  metadata: Metadata;
};

export interface Metadata {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  generateName?: string;
  ownerReferences?: Array<{ uid: string; kind: string; name: string; apiVersion: string }>;
  [k: string]: unknown;
}
