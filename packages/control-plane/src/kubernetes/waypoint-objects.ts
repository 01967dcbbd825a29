import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';

/** What a waypoint Deployment needs to reach the control plane. */
export interface WaypointTemplate {
  image: string;
  /** host:port of the control plane's xDS and CA Service. */
  xds: string;
  trustDomain: string;
  /** Audience of the waypoint's projected ServiceAccount token. */
  tokenAudience: string;
  /** The trusted roots, copied into a ConfigMap in the Gateway's namespace (pods mount only their own namespace's). */
  rootsPem: string;
}

export interface GatewayRef {
  namespace: string;
  name: string;
  uid: string;
}

const GATEWAY_NAME_LABEL = 'gateway.networking.k8s.io/gateway-name';
const HBONE_PORT = 15008;

/**
 * The objects a waypoint Gateway owns: ServiceAccount, roots ConfigMap, Deployment running
 * `zmesh waypoint`, Service on 15008. Each carries a controller ownerReference to the
 * Gateway, so the API server's garbage collector deletes them with it, and is validated
 * against the Kubernetes 1.36 schema (kubernetes-models) before it is returned: an invalid
 * object throws here, never reaches the API.
 */
export function waypointObjects(gw: GatewayRef, t: WaypointTemplate): Record<string, unknown>[] {
  const owner = {
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'Gateway',
    name: gw.name,
    uid: gw.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
  const labels = { [GATEWAY_NAME_LABEL]: gw.name, 'app.kubernetes.io/managed-by': 'zmesh' };
  const meta = (name: string) => ({ name, namespace: gw.namespace, labels, ownerReferences: [owner] });
  const roots = `${gw.name}-zmesh-roots`;
  const objects = [
    new ServiceAccount({ metadata: meta(gw.name) }),
    new ConfigMap({
      metadata: meta(roots),
      data: { 'root-cert.pem': t.rootsPem },
    }),
    new Deployment({
      metadata: meta(gw.name),
      spec: {
        replicas: 1,
        selector: { matchLabels: { [GATEWAY_NAME_LABEL]: gw.name } },
        template: {
          metadata: { labels: { ...labels, 'istio.io/dataplane-mode': 'none' } },
          spec: {
            serviceAccountName: gw.name,
            automountServiceAccountToken: false,
            securityContext: { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532 },
            containers: [
              {
                name: 'waypoint',
                image: t.image,
                args: [
                  'waypoint',
                  '--gateway',
                  `${gw.namespace}/${gw.name}`,
                  '--address',
                  '$(POD_IP)',
                  '--trust-domain',
                  t.trustDomain,
                  '--xds',
                  t.xds,
                  '--token-file',
                  '/var/run/secrets/zmesh/token',
                  '--roots-file',
                  '/var/run/zmesh/roots/root-cert.pem',
                ],
                env: [{ name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }],
                ports: [
                  { name: 'hbone', containerPort: HBONE_PORT, protocol: 'TCP' },
                  { name: 'http-metrics', containerPort: 15020, protocol: 'TCP' },
                ],
                readinessProbe: { httpGet: { path: '/healthz/ready', port: 15020 }, periodSeconds: 5 },
                securityContext: {
                  allowPrivilegeEscalation: false,
                  readOnlyRootFilesystem: true,
                  capabilities: { drop: ['ALL'] },
                },
                volumeMounts: [
                  { name: 'token', mountPath: '/var/run/secrets/zmesh', readOnly: true },
                  { name: 'roots', mountPath: '/var/run/zmesh/roots', readOnly: true },
                ],
              },
            ],
            volumes: [
              {
                name: 'token',
                projected: {
                  sources: [
                    {
                      serviceAccountToken: {
                        audience: t.tokenAudience,
                        expirationSeconds: 3600,
                        path: 'token',
                      },
                    },
                  ],
                },
              },
              { name: 'roots', configMap: { name: roots } },
            ],
          },
        },
      },
    }),
    new Service({
      metadata: meta(gw.name),
      spec: {
        selector: { [GATEWAY_NAME_LABEL]: gw.name },
        ports: [{ name: 'hbone', port: HBONE_PORT, targetPort: HBONE_PORT, protocol: 'TCP' }],
      },
    }),
  ];
  return objects.map((o) => {
    o.validate();
    return o.toJSON() as Record<string, unknown>;
  });
}
