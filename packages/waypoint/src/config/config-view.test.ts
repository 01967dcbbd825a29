import test from 'ava';
import { parseWaypointConfig } from './config-parser.js';
import { ConfigView } from './config-view.js';

test('GAMMA MeshPorts: a parentRef with a port binds the route to that service port only', (t) => {
  const r = parseWaypointConfig(
    `
waypoint: { name: waypoint, namespace: ns }
services:
  - { name: echo-v1, namespace: ns, addresses: [10.96.0.1], ports: [{ servicePort: 80, targetPort: 8080 }, { servicePort: 8080, targetPort: 8080 }] }
  - { name: echo-v2, namespace: ns, addresses: [10.96.0.2], ports: [{ servicePort: 80, targetPort: 8080 }, { servicePort: 8080, targetPort: 8080 }] }
httpRoutes:
  - name: with-port
    parentRefs: [{ name: echo-v1, port: 80 }]
    rules: [{ filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { set: [{ name: X-Header-Set, value: v1 }] } }] }]
  - name: no-port
    parentRefs: [{ name: echo-v2 }]
    rules: [{ filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { set: [{ name: X-Header-Set, value: v2 }] } }] }]
`,
    't',
  );
  if (!r.ok) return t.fail(r.error.join('\n'));
  const view = new ConfigView(r.value);
  const [v1, v2] = r.value.services;
  t.truthy(view.routes(v1!, 80), 'explicit port set: the route applies there');
  t.is(view.routes(v1!, 8080), undefined, 'explicit port, another port: the route does not apply');
  t.truthy(view.routes(v2!, 80), 'no port: every port');
  t.truthy(view.routes(v2!, 8080));
});

test('backendRefs and mirrors that name no service are listed (ResolvedRefs=False), the route kept', (t) => {
  const r = parseWaypointConfig(
    `
waypoint: { name: waypoint, namespace: ns }
services:
  - { name: echo, namespace: ns, addresses: [10.96.0.1], ports: [{ servicePort: 80, targetPort: 8080 }] }
httpRoutes:
  - name: r
    parentRefs: [{ name: echo }]
    rules:
      - backendRefs: [{ name: echo }, { name: gone, weight: 1 }]
        filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: shadow, namespace: other } } }]
`,
    't',
  );
  if (!r.ok) return t.fail(r.error.join('\n'));
  const view = new ConfigView(r.value);
  t.deepEqual(view.unresolvedBackends, ['ns/r#0 -> ns/gone', 'ns/r#0 -> other/shadow']);
  t.truthy(view.routes(r.value.services[0]!, 80));
});
