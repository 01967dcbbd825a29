import { ConfigStore, compile } from '@zmesh/control-plane';
import { convertAuthorizationPolicy } from '@zmesh/shared';
import { decodeWaypointConfig } from '@zmesh/waypoint';
import test from 'ava';

/**
 * Issue 36's JWT and L7 policy through the control plane: a RequestAuthentication and an
 * AuthorizationPolicy written as for Istio compile into the waypoint resource, and the
 * waypoint's own decoder accepts them with every field read.
 */
const YAML = `kind: Namespace
metadata: { name: shop, labels: { istio.io/dataplane-mode: ambient, istio.io/use-waypoint: waypoint } }
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
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: jwt, namespace: shop }
spec:
  targetRefs: [{ kind: Service, group: "", name: web }]
  jwtRules:
    - issuer: https://idp.example
      audiences: [shop]
      jwksUri: http://keys.auth.svc.cluster.local/jwks
      timeout: 2s
      fromHeaders: [{ name: x-token }]
      forwardOriginalToken: true
      outputClaimToHeaders: [{ header: x-sub, claim: sub }]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: require-jwt, namespace: shop }
spec:
  targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]
  action: DENY
  rules:
    - from: [{ source: { notRequestPrincipals: ["*"] } }]
      to: [{ operation: { paths: ["/api*"], ports: ["80"] } }]
      when: [{ key: "request.auth.claims[scope]", notValues: ["write*"] }]
`;

test('a RequestAuthentication and a JWT policy reach the waypoint and are accepted there', (t) => {
  const store = new ConfigStore();
  const applied = store.applyYaml(YAML);
  if (!applied.ok) return t.fail(applied.error.join('\n'));
  const [wp] = compile(store.view(), { trustDomain: 'cluster.local' }).waypoints ?? [];
  const decoded = decodeWaypointConfig(JSON.parse(JSON.stringify(wp!.config)), 'xds shop/waypoint');
  if (!decoded.ok) return t.fail(decoded.error.join('\n'));
  t.like(decoded.value.requestAuthentications[0], {
    name: 'jwt',
    targetServices: ['shop/web'],
    rules: [
      {
        issuer: 'https://idp.example',
        timeoutMs: 2000,
        from: [{ header: 'x-token', prefix: '' }],
        forwardOriginalToken: true,
        outputClaimToHeaders: [{ header: 'x-sub', claim: 'sub' }],
      },
    ],
  });
  t.like(decoded.value.policies[0], { name: 'require-jwt', action: 'DENY' });
});

test('apply refuses what the waypoint could not serve, with the field and the reason', (t) => {
  const store = new ConfigStore();
  const applied = store.applyYaml(
    YAML.replace('http://keys.auth.svc.cluster.local/jwks', 'https://www.googleapis.com/oauth2/v3/certs'),
  );
  t.false(applied.ok);
  t.regex(applied.ok ? '' : applied.error.join('\n'), /jwksUri: host www.googleapis.com is outside the mesh/);
  // Admission's check of an AuthorizationPolicy (convertAuthorizationPolicy) runs the waypoint's reader too.
  const converted = convertAuthorizationPolicy({
    kind: 'AuthorizationPolicy',
    metadata: { name: 'p', namespace: 'shop' },
    spec: {
      targetRefs: [{ kind: 'Gateway', name: 'waypoint' }],
      rules: [{ when: [{ key: 'request.auth.claims[scope]', notValues: ['*write*'] }] }],
    },
  });
  t.deepEqual(converted.ok ? [] : converted.error, [
    'spec.rules[0].when[0].notValues[0]: "*write*" has a * other than at the start or the end',
  ]);
});
