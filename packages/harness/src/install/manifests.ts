import { GatewayClass } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/GatewayClass';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import { ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IEnvVar } from 'kubernetes-models/v1/EnvVar';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Secret } from 'kubernetes-models/v1/Secret';
import type { ISecurityContext } from 'kubernetes-models/v1/SecurityContext';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import type { InstallValues } from './install-values.js';

/**
 * What `zmesh install` prints (deploy/kubernetes/zmesh.yaml is its output with the defaults,
 * kept in step by test/install-manifests.test.ts). Every object is built with the typed
 * models of `kubernetes-models` (Kubernetes 1.36's OpenAPI schemas) and
 * `@kubernetes-models/gateway-api`, and validated against those schemas before it is printed.
 *
 * Container args use only flags that `zmesh control-plane` and `zmesh ztunnel` accept today
 * (the test parses each with the daemon's own commander definition). The image's entrypoint
 * is bin/zmesh (Containerfile), so a container's args start with the subcommand.
 */

export interface InstallOptions {
  readonly namespace: string;
  readonly image: string;
  readonly values: InstallValues;
  /**
   * The mesh's root CA, to print as the zmesh-ca Secret (both files, for the control plane)
   * and the zmesh-roots ConfigMap (the certificate alone, for the nodes). Without it the
   * operator creates both (docs/kubernetes.md) and no key is ever printed.
   */
  readonly ca?: { readonly certPem: string; readonly keyPem: string };
}

/** The GatewayClass the waypoint controller owns; Istio's `istio-waypoint` is accepted too. */
const WAYPOINT_GATEWAY_CLASS = 'zmesh-waypoint';
const WAYPOINT_CONTROLLER = 'zmesh.io/waypoint-controller';

/** The image's entrypoint (Containerfile); container args start with the subcommand. */
export const IMAGE_ENTRYPOINT = '/opt/zmesh/bin/zmesh';

const CONTROL_PLANE = 'zmesh-control-plane';
const NODE = 'zmesh-node';
/** Created by the operator from the mesh's root CA (docs/kubernetes.md); never printed here. */
const CA_SECRET = 'zmesh-ca';
/** The root certificate alone, for the nodes: they never see the CA key. */
const ROOTS_CONFIGMAP = 'zmesh-roots';
const MESH_CONFIGMAP = 'zmesh-mesh-config';

/** Paths inside the containers. */
const PATHS = {
  caDir: '/var/run/zmesh/ca',
  meshConfig: '/etc/zmesh/mesh',
  roots: '/var/run/zmesh/roots',
  token: '/var/run/secrets/zmesh/token',
  /** The ZDS socket directory: the node agent serves, ztunnel connects (a hostPath, so either may restart). */
  agentDir: '/var/run/ztunnel',
  /** The node agent's socket for the CNI plugin, which the runtime runs on the host: same path both sides. */
  cniSocketDir: '/var/run/zmesh-cni',
  /** The host's CNI plugin binaries and network configs, where the node agent installs and chains zmesh-cni. */
  cniBin: '/host/opt/cni/bin',
  cniConf: '/host/etc/cni/net.d',
  /** Where runtimes bind-mount pods' network namespaces (CNI_NETNS), same path both sides. */
  netnsDir: '/var/run/netns',
  /** The in-cluster API credentials (loadFromCluster reads token, ca.crt and namespace here). */
  apiAccess: '/var/run/secrets/kubernetes.io/serviceaccount',
  snapshotDir: '/var/lib/zmesh',
  /** The control plane's embedded store (SQLite), on the `state` volume. */
  stateDir: '/var/lib/zmesh',
} as const;

const XDS_PORT = 15010;

/** A Kubernetes object as printed: plain JSON, validated. */
export type ManifestObject = { apiVersion: string; kind: string; metadata: { name: string } } & Record<
  string,
  unknown
>;

interface Model {
  validate(): void;
  toJSON(): unknown;
}

function labels(component: string): Record<string, string> {
  return { 'app.kubernetes.io/name': component, 'app.kubernetes.io/part-of': 'zmesh' };
}

function selector(component: string): Record<string, string> {
  return { 'app.kubernetes.io/name': component };
}

/** Non-root, read-only, nothing added: the control plane needs no privilege. */
const RESTRICTED: ISecurityContext = {
  runAsNonRoot: true,
  runAsUser: 65532,
  runAsGroup: 65532,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'] },
  seccompProfile: { type: 'RuntimeDefault' },
};

/**
 * ztunnel in capture mode: root (bpffs pins, the pods' cgroups), with only the capabilities
 * capture uses: BPF and PERFMON to load and pin the programs, NET_ADMIN to attach them to
 * cgroups and set socket options, SYS_ADMIN for setns(2) into each pod's network namespace
 * (its listeners live there), NET_RAW for transparent sockets. Not privileged.
 */
const ZTUNNEL_SECURITY: ISecurityContext = {
  runAsUser: 0,
  runAsGroup: 0,
  privileged: false,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'], add: ['BPF', 'PERFMON', 'NET_ADMIN', 'SYS_ADMIN', 'NET_RAW'] },
  seccompProfile: { type: 'Unconfined' },
};

function env(values: InstallValues, extra: IEnvVar[] = []): IEnvVar[] {
  return [
    { name: 'ZMESH_LOG', value: values.logLevel },
    { name: 'ZMESH_LOG_FORMAT', value: 'json' },
    ...extra,
  ];
}

function controlPlaneContainer(o: InstallOptions): IContainer {
  return {
    name: 'control-plane',
    image: o.image,
    imagePullPolicy: o.values.imagePullPolicy,
    args: [
      'control-plane',
      '--config',
      PATHS.meshConfig,
      '--ca-dir',
      PATHS.caDir,
      '--trust-domain',
      o.values.trustDomain,
      // xDS and the CA on the pod IP (the Service's endpoints, the readiness probe), with TLS:
      // a serving certificate from the mesh CA for the Service names, renewed before expiry.
      // Proxies verify it against the zmesh-roots ConfigMap (docs/xds.md, Transport).
      '--host',
      '$(POD_IP)',
      '--serving-dns',
      `${CONTROL_PLANE}.${o.namespace}.svc,${CONTROL_PLANE}.${o.namespace}.svc.cluster.local`,
      '--port',
      String(XDS_PORT),
      // The admin API (apply, node tokens) stays on its default 0600 Unix socket in the
      // container's /tmp: reached by `kubectl exec … zmesh apply`, never over the network.
      // State: shared in etcd when given (every replica serves every apply), else the
      // embedded store on the pod's `state` volume (kept across container restarts).
      ...(o.values.stateStore ? ['--store', o.values.stateStore] : ['--state-dir', PATHS.stateDir]),
      // Controller mode: informers on the API, a Lease for the writer (POD_NAME, POD_NAMESPACE).
      // Not with etcd: that mode's replicas share applied objects, and the API server's objects
      // would be replaced by each shared commit (the command refuses the pair).
      ...(o.values.stateStore ? [] : ['--kubernetes']),
    ],
    env: env(o.values, [
      { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
      { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
    ]),
    ports: [{ name: 'grpc-xds', containerPort: XDS_PORT, protocol: 'TCP' }],
    readinessProbe: { tcpSocket: { port: XDS_PORT }, periodSeconds: 5 },
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '512Mi' } },
    securityContext: RESTRICTED,
    volumeMounts: [
      { name: 'ca', mountPath: PATHS.caDir, readOnly: true },
      { name: 'mesh-config', mountPath: PATHS.meshConfig, readOnly: true },
      { name: 'tmp', mountPath: '/tmp' },
      ...(o.values.stateStore ? [] : [{ name: 'state', mountPath: PATHS.stateDir }]),
    ],
  };
}

function ztunnelContainer(o: InstallOptions): IContainer {
  return {
    name: 'ztunnel',
    image: o.image,
    imagePullPolicy: o.values.imagePullPolicy,
    args: [
      'ztunnel',
      '--node',
      '$(NODE_NAME)',
      '--address',
      '$(POD_IP)',
      '--trust-domain',
      o.values.trustDomain,
      // Not loopback, so TLS: the control plane's certificate must lead to the zmesh-roots
      // ConfigMap (--roots-file) and name this host.
      '--xds',
      `${CONTROL_PLANE}.${o.namespace}.svc:${XDS_PORT}`,
      '--token-file',
      PATHS.token,
      '--roots-file',
      `${PATHS.roots}/root-cert.pem`,
      '--snapshot',
      `${PATHS.snapshotDir}/xds-snapshot`,
      // Istio's ZDS socket, where istio-cni's node agent serves it (docs/zds.md).
      '--zds-socket',
      `${PATHS.agentDir}/ztunnel.sock`,
      '--cgroup-root',
      '/sys/fs/cgroup',
      '--access-log',
      o.values.accessLog,
    ],
    env: env(o.values, [
      { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
      { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
    ]),
    ports: [
      { name: 'admin', containerPort: 15000, protocol: 'TCP' },
      { name: 'http-metrics', containerPort: 15020, protocol: 'TCP' },
      { name: 'health', containerPort: 15021, protocol: 'TCP' },
    ],
    // README "Kubernetes probes": liveness never on readiness; a start-up budget above the
    // xDS backoff cap plus a CA round trip.
    startupProbe: {
      httpGet: { path: '/healthz/ready', port: 15021 },
      periodSeconds: 2,
      failureThreshold: 60,
    },
    readinessProbe: { httpGet: { path: '/healthz/ready', port: 15021 }, periodSeconds: 5 },
    livenessProbe: {
      httpGet: { path: '/healthz/live', port: 15021 },
      periodSeconds: 10,
      failureThreshold: 3,
    },
    resources: { requests: { cpu: '200m', memory: '128Mi' }, limits: { memory: '1Gi' } },
    securityContext: ZTUNNEL_SECURITY,
    volumeMounts: [
      { name: 'token', mountPath: '/var/run/secrets/zmesh', readOnly: true },
      { name: 'roots', mountPath: PATHS.roots, readOnly: true },
      { name: 'snapshot', mountPath: PATHS.snapshotDir },
      { name: 'ztunnel-sockets', mountPath: PATHS.agentDir },
      { name: 'bpffs', mountPath: '/sys/fs/bpf', mountPropagation: 'HostToContainer' },
      { name: 'cgroup', mountPath: '/sys/fs/cgroup', readOnly: true },
      { name: 'host-proc', mountPath: '/host/proc', readOnly: true },
      { name: 'tmp', mountPath: '/tmp' },
    ],
  };
}

/**
 * The node agent: root for the host's /proc and CNI directories, with SYS_PTRACE only, to
 * open other users' /proc/<pid>/ns/net (pods' network namespaces); nothing for BPF or
 * networking (ztunnel does that). Not privileged.
 */
const NODE_AGENT_SECURITY: ISecurityContext = {
  runAsUser: 0,
  runAsGroup: 0,
  privileged: false,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'], add: ['SYS_PTRACE'] },
  seccompProfile: { type: 'RuntimeDefault' },
};

const NODE_AGENT_HEALTH = 15022;

function nodeAgentContainer(o: InstallOptions): IContainer {
  return {
    name: 'node-agent',
    image: o.image,
    imagePullPolicy: o.values.imagePullPolicy,
    args: [
      'node-agent',
      '--node',
      '$(NODE_NAME)',
      '--zds-socket',
      `${PATHS.agentDir}/ztunnel.sock`,
      '--cni-socket',
      `${PATHS.cniSocketDir}/cni.sock`,
      '--proc',
      '/host/proc',
      '--cni-bin-dir',
      PATHS.cniBin,
      '--cni-conf-dir',
      PATHS.cniConf,
      // The plugin runs on the host, with the host's Node (docs/kubernetes.md, "Node agent").
      '--cni-node',
      '/usr/bin/node',
      '--host',
      '0.0.0.0',
      '--port',
      String(NODE_AGENT_HEALTH),
    ],
    env: env(o.values, [{ name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } }]),
    ports: [{ name: 'agent-health', containerPort: NODE_AGENT_HEALTH, protocol: 'TCP' }],
    readinessProbe: { httpGet: { path: '/healthz/ready', port: NODE_AGENT_HEALTH }, periodSeconds: 5 },
    livenessProbe: {
      httpGet: { path: '/healthz/live', port: NODE_AGENT_HEALTH },
      periodSeconds: 10,
      failureThreshold: 3,
    },
    resources: { requests: { cpu: '50m', memory: '96Mi' }, limits: { memory: '512Mi' } },
    securityContext: NODE_AGENT_SECURITY,
    volumeMounts: [
      { name: 'kube-api-access', mountPath: PATHS.apiAccess, readOnly: true },
      { name: 'ztunnel-sockets', mountPath: PATHS.agentDir },
      { name: 'cni-socket', mountPath: PATHS.cniSocketDir },
      { name: 'cni-bin', mountPath: PATHS.cniBin },
      { name: 'cni-conf', mountPath: PATHS.cniConf },
      { name: 'netns', mountPath: PATHS.netnsDir, readOnly: true, mountPropagation: 'HostToContainer' },
      { name: 'host-proc', mountPath: '/host/proc', readOnly: true },
      { name: 'tmp', mountPath: '/tmp' },
    ],
  };
}

function crdRules() {
  return [
    { apiGroups: [''], resources: ['namespaces', 'pods'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] },
    {
      apiGroups: ['security.istio.io'],
      resources: ['authorizationpolicies'],
      verbs: ['get', 'list', 'watch'],
    },
    {
      apiGroups: ['gateway.networking.k8s.io'],
      resources: ['gatewayclasses', 'gateways', 'httproutes', 'grpcroutes'],
      verbs: ['get', 'list', 'watch'],
    },
    // Status written back: Programmed, Accepted/ResolvedRefs, a refused policy's condition.
    {
      apiGroups: ['gateway.networking.k8s.io'],
      resources: ['gatewayclasses/status', 'gateways/status', 'httproutes/status', 'grpcroutes/status'],
      verbs: ['update', 'patch'],
    },
    {
      apiGroups: ['security.istio.io'],
      resources: ['authorizationpolicies/status'],
      verbs: ['update', 'patch'],
    },
    // `zmesh ns l7 on|off` sets istio.io/use-waypoint on the Namespace.
    { apiGroups: [''], resources: ['namespaces'], verbs: ['patch'] },
    // Each waypoint's ServiceAccount, roots ConfigMap, Deployment and Service, owned by its Gateway.
    {
      apiGroups: [''],
      resources: ['services', 'serviceaccounts', 'configmaps'],
      verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'],
    },
    {
      apiGroups: ['apps'],
      resources: ['deployments'],
      verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'],
    },
    // ztunnels and waypoints authenticate with projected ServiceAccount tokens.
    { apiGroups: ['authentication.k8s.io'], resources: ['tokenreviews'], verbs: ['create'] },
  ];
}

/** Every object, in apply order (namespace and RBAC before the workloads that use them). */
function installModels(o: InstallOptions): Model[] {
  const ns = o.namespace;
  const meta = (name: string, component: string) => ({ name, namespace: ns, labels: labels(component) });
  const cpReplicas = o.values.controlPlaneReplicas;
  const models: Model[] = [
    // The mesh's own namespace is never captured.
    new Namespace({
      metadata: { name: ns, labels: { ...labels('zmesh'), 'istio.io/dataplane-mode': 'none' } },
    }),
    new ServiceAccount({ metadata: meta(CONTROL_PLANE, CONTROL_PLANE) }),
    // No token is mounted into every container: ztunnel has only its projected token (audience
    // below) for the control plane; the node agent alone gets an API token (kube-api-access).
    new ServiceAccount({ metadata: meta(NODE, NODE), automountServiceAccountToken: false }),
    new ClusterRole({ metadata: { name: CONTROL_PLANE, labels: labels(CONTROL_PLANE) }, rules: crdRules() }),
    new ClusterRoleBinding({
      metadata: { name: CONTROL_PLANE, labels: labels(CONTROL_PLANE) },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: CONTROL_PLANE },
      subjects: [{ kind: 'ServiceAccount', name: CONTROL_PLANE, namespace: ns }],
    }),
    // The node agent reads its node's Pods and the Namespaces' labels; it writes nothing.
    new ClusterRole({
      metadata: { name: NODE, labels: labels(NODE) },
      rules: [{ apiGroups: [''], resources: ['pods', 'namespaces'], verbs: ['get', 'list', 'watch'] }],
    }),
    new ClusterRoleBinding({
      metadata: { name: NODE, labels: labels(NODE) },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: NODE },
      subjects: [{ kind: 'ServiceAccount', name: NODE, namespace: ns }],
    }),
    // Leader election among the replicas, in the mesh's namespace only.
    new Role({
      metadata: meta(CONTROL_PLANE, CONTROL_PLANE),
      rules: [
        {
          apiGroups: ['coordination.k8s.io'],
          resources: ['leases'],
          verbs: ['get', 'watch', 'create', 'update', 'patch'],
        },
      ],
    }),
    new RoleBinding({
      metadata: meta(CONTROL_PLANE, CONTROL_PLANE),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: CONTROL_PLANE },
      subjects: [{ kind: 'ServiceAccount', name: CONTROL_PLANE, namespace: ns }],
    }),
    ...caObjects(o),
    // The control plane's YAML config directory (Pods, Services, policies in its own format);
    // empty by default.
    new ConfigMap({ metadata: meta(MESH_CONFIGMAP, CONTROL_PLANE), data: {} }),
    new Deployment({
      metadata: meta(CONTROL_PLANE, CONTROL_PLANE),
      spec: {
        replicas: cpReplicas,
        selector: { matchLabels: selector(CONTROL_PLANE) },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
        template: {
          metadata: { labels: labels(CONTROL_PLANE) },
          spec: {
            serviceAccountName: CONTROL_PLANE,
            // Controller mode reads and writes through the API with this ServiceAccount's token.
            automountServiceAccountToken: true,
            priorityClassName: 'system-cluster-critical',
            securityContext: { runAsNonRoot: true, fsGroup: 65532 },
            topologySpreadConstraints: [
              {
                maxSkew: 1,
                topologyKey: 'kubernetes.io/hostname',
                whenUnsatisfiable: 'ScheduleAnyway',
                labelSelector: { matchLabels: selector(CONTROL_PLANE) },
              },
            ],
            containers: [controlPlaneContainer(o)],
            volumes: [
              { name: 'ca', secret: { secretName: CA_SECRET, defaultMode: 0o440 } },
              { name: 'mesh-config', configMap: { name: MESH_CONFIGMAP } },
              { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
              // The embedded store outlives a container restart (crash, OOM kill), not the pod.
              ...(o.values.stateStore ? [] : [{ name: 'state', emptyDir: { sizeLimit: '256Mi' } }]),
            ],
          },
        },
      },
    }),
    // With one replica a budget of one would block every node drain.
    ...(cpReplicas > 1
      ? [
          new PodDisruptionBudget({
            metadata: meta(CONTROL_PLANE, CONTROL_PLANE),
            spec: { minAvailable: 1, selector: { matchLabels: selector(CONTROL_PLANE) } },
          }),
        ]
      : []),
    new Service({
      metadata: meta(CONTROL_PLANE, CONTROL_PLANE),
      spec: {
        selector: selector(CONTROL_PLANE),
        ports: [
          { name: 'grpc-xds', port: XDS_PORT, targetPort: XDS_PORT, protocol: 'TCP', appProtocol: 'grpc' },
        ],
      },
    }),
    new DaemonSet({
      metadata: meta('ztunnel', 'ztunnel'),
      spec: {
        selector: { matchLabels: selector('ztunnel') },
        updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1, maxSurge: 0 } },
        template: {
          metadata: { labels: labels('ztunnel') },
          spec: {
            serviceAccountName: NODE,
            automountServiceAccountToken: false,
            priorityClassName: 'system-node-critical',
            terminationGracePeriodSeconds: 30,
            // Every node, whatever its taints: a node without ztunnel cannot serve mesh pods.
            tolerations: [
              { operator: 'Exists', effect: 'NoSchedule' },
              { operator: 'Exists', effect: 'NoExecute' },
              { key: 'CriticalAddonsOnly', operator: 'Exists' },
            ],
            nodeSelector: { 'kubernetes.io/os': 'linux' },
            containers: [ztunnelContainer(o), nodeAgentContainer(o)],
            volumes: [
              {
                name: 'token',
                projected: {
                  sources: [
                    {
                      serviceAccountToken: {
                        audience: o.values.tokenAudience,
                        expirationSeconds: 3600,
                        path: 'token',
                      },
                    },
                  ],
                },
              },
              { name: 'roots', configMap: { name: ROOTS_CONFIGMAP } },
              { name: 'snapshot', emptyDir: {} },
              { name: 'ztunnel-sockets', hostPath: { path: PATHS.agentDir, type: 'DirectoryOrCreate' } },
              { name: 'bpffs', hostPath: { path: '/sys/fs/bpf', type: 'Directory' } },
              { name: 'cgroup', hostPath: { path: '/sys/fs/cgroup', type: 'Directory' } },
              { name: 'host-proc', hostPath: { path: '/proc', type: 'Directory' } },
              { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
              // The node agent's.
              {
                name: 'kube-api-access',
                projected: {
                  sources: [
                    { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
                    { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
                    {
                      downwardAPI: {
                        items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }],
                      },
                    },
                  ],
                },
              },
              { name: 'cni-socket', hostPath: { path: PATHS.cniSocketDir, type: 'DirectoryOrCreate' } },
              { name: 'cni-bin', hostPath: { path: '/opt/cni/bin', type: 'DirectoryOrCreate' } },
              { name: 'cni-conf', hostPath: { path: '/etc/cni/net.d', type: 'DirectoryOrCreate' } },
              { name: 'netns', hostPath: { path: PATHS.netnsDir, type: 'DirectoryOrCreate' } },
            ],
          },
        },
      },
    }),
    new GatewayClass({
      metadata: { name: WAYPOINT_GATEWAY_CLASS, labels: labels(CONTROL_PLANE) },
      spec: {
        controllerName: WAYPOINT_CONTROLLER,
        description: 'zmesh waypoints (per-namespace L7 proxies)',
      },
    }),
  ];
  return models;
}

function caObjects(o: InstallOptions): Model[] {
  if (!o.ca) return [];
  return [
    new Secret({
      metadata: { name: CA_SECRET, namespace: o.namespace, labels: labels(CONTROL_PLANE) },
      type: 'Opaque',
      stringData: { 'root-cert.pem': o.ca.certPem, 'root-key.pem': o.ca.keyPem },
    }),
    new ConfigMap({
      metadata: { name: ROOTS_CONFIGMAP, namespace: o.namespace, labels: labels(NODE) },
      data: { 'root-cert.pem': o.ca.certPem },
    }),
  ];
}

/**
 * The objects as plain JSON, each validated against its schema first: a generator bug is
 * an error here, never a manifest the API server refuses.
 */
export function installObjects(o: InstallOptions): ManifestObject[] {
  return installModels(o).map((m) => {
    m.validate();
    return m.toJSON() as ManifestObject;
  });
}

type ModelClass = new (data: never) => Model;

/** The model of every kind `zmesh install` prints, by `apiVersion/kind`. */
const MODELS: Record<string, ModelClass> = Object.fromEntries(
  [
    Namespace,
    Secret,
    ServiceAccount,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
    ConfigMap,
    Deployment,
    PodDisruptionBudget,
    Service,
    DaemonSet,
    GatewayClass,
  ].map((c) => {
    const { apiVersion, kind } = c as unknown as { apiVersion: string; kind: string };
    return [`${apiVersion}/${kind}`, c as unknown as ModelClass];
  }),
);

/**
 * Validates a parsed manifest (e.g. a document of deploy/kubernetes/zmesh.yaml) against its
 * kind's schema; throws naming what is wrong, or that the kind is not one zmesh installs.
 */
export function validateManifest(obj: { apiVersion?: unknown; kind?: unknown }): void {
  const Model = MODELS[`${String(obj.apiVersion)}/${String(obj.kind)}`];
  if (!Model) throw new Error(`${String(obj.apiVersion)}/${String(obj.kind)} is not a kind zmesh installs`);
  new Model(obj as never).validate();
}
