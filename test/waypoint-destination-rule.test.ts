import { ConfigStore, compile } from '@zmesh/control-plane';
import { decodeWaypointConfig } from '@zmesh/waypoint';
import test from 'ava';

/**
 * Issue 7's destination policy through the control plane: a DestinationRule compiles into
 * the waypoint resource, and the waypoint's own decoder accepts it with the limits set.
 */
const YAML = `kind: Namespace
metadata: { name: shop, labels: { istio.io/dataplane-mode: ambient, istio.io/use-waypoint: waypoint } }
---
kind: Pod
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { serviceAccountName: web, nodeName: node-b }
status: { podIP: 10.9.0.2 }
---
kind: Pod
metadata: { name: waypoint, namespace: shop, labels: { gateway.networking.k8s.io/gateway-name: waypoint } }
spec: { serviceAccountName: waypoint, nodeName: node-w }
status: { podIP: 10.9.0.9 }
---
kind: Service
metadata: { name: web, namespace: shop }
spec: { clusterIP: 10.96.9.10, selector: { app: web }, ports: [{ port: 80, targetPort: 8080 }] }
---
kind: Gateway
metadata: { name: waypoint, namespace: shop }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 10.9.0.9 }] }
---
kind: DestinationRule
metadata: { name: web, namespace: shop }
spec:
  host: web
  trafficPolicy:
    connectionPool: { tcp: { maxConnections: 64 }, http: { http1MaxPendingRequests: 8, http2MaxRequests: 32 } }
    outlierDetection: { consecutive5xxErrors: 2, interval: 1s, baseEjectionTime: 3s, maxEjectionPercent: 100 }
`;

test('a DestinationRule reaches the waypoint as its backend policy and is accepted there', (t) => {
  const store = new ConfigStore();
  const applied = store.applyYaml(YAML);
  if (!applied.ok) return t.fail(applied.error.join('\n'));
  const [wp] = compile(store.view(), { trustDomain: 'cluster.local' }).waypoints ?? [];
  t.is(wp?.name, 'shop/waypoint');
  const decoded = decodeWaypointConfig(JSON.parse(JSON.stringify(wp!.config)), 'xds shop/waypoint');
  if (!decoded.ok) return t.fail(decoded.error.join('\n'));
  const [policy] = decoded.value.backendPolicies;
  t.is(policy?.service, 'shop/web.shop.svc.cluster.local');
  t.like(policy?.circuitBreaker, { maxConnections: 64, maxPendingRequests: 8, maxRequests: 32 });
  t.like(policy?.outlier, { consecutive5xx: 2, intervalMs: 1000, baseEjectionMs: 3000 });
});
