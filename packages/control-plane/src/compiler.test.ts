import test from 'ava';
import { compile } from './compiler.js';
import { ConfigStore } from './config-store.js';
import { NAMESPACE_YAML, podYaml, SERVICE_YAML } from './testing/fixtures.js';

function compiled(...docs: string[]) {
  const store = new ConfigStore();
  const applied = store.applyYaml(docs.join('---\n'));
  if (!applied.ok) throw new Error(applied.error.join('\n'));
  return compile(store.view(), { trustDomain: 'example.org' });
}

test('a Pod compiles to an Istio-shaped Workload', (t) => {
  const { workloads, services } = compiled(NAMESPACE_YAML, podYaml('a', '10.1.0.1'), SERVICE_YAML);
  t.like(workloads[0], {
    uid: 'Kubernetes//Pod/ns1/a',
    name: 'a',
    namespace: 'ns1',
    addresses: ['10.1.0.1'],
    node: 'node-1',
    trustDomain: 'example.org',
    serviceAccount: 'sa-a',
    tunnelProtocol: 'HBONE',
    status: 'HEALTHY',
    services: { 'ns1/svc.ns1.svc.cluster.local': [{ servicePort: 80, targetPort: 8080 }] },
  });
  t.like(services[0], {
    hostname: 'svc.ns1.svc.cluster.local',
    addresses: [{ network: '', address: '10.96.0.10' }],
    ports: [{ servicePort: 80, targetPort: 8080, appProtocol: 'HTTP11' }],
  });
});

test('a namespace without ambient gets plaintext workloads; the pod label can opt in', (t) => {
  const plain = NAMESPACE_YAML.replace('    istio.io/dataplane-mode: ambient\n', '    x: y\n');
  const { workloads } = compiled(
    plain,
    podYaml('a', '10.1.0.1'),
    podYaml('b', '10.1.0.2', 'node-1', { 'istio.io/dataplane-mode': 'ambient' }),
  );
  t.is(workloads.find((w) => w.name === 'a')?.tunnelProtocol, 'NONE');
  t.is(workloads.find((w) => w.name === 'b')?.tunnelProtocol, 'HBONE');
});

test('use-waypoint names the waypoint by hostname for services and pods, but not the waypoint itself', (t) => {
  const ns = NAMESPACE_YAML.replace('ambient\n', 'ambient\n    istio.io/use-waypoint: wp\n');
  const gateway = `kind: Gateway
metadata: { name: wp, namespace: ns1 }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 10.96.0.99 }] }
`;
  const { workloads, services } = compiled(
    ns,
    gateway,
    SERVICE_YAML,
    podYaml('a', '10.1.0.1'),
    podYaml('wp-0', '10.1.0.50', 'node-1', { 'gateway.networking.k8s.io/gateway-name': 'wp' }),
  );
  const ref = { hostname: { namespace: 'ns1', hostname: 'wp.ns1.svc.cluster.local' }, hbonePort: 15008 };
  t.deepEqual(workloads.find((w) => w.name === 'a')?.waypoint, ref);
  t.deepEqual(services.find((s) => s.name === 'svc')?.waypoint, ref);
  const waypointPod = workloads.find((w) => w.name === 'wp-0');
  t.is(waypointPod?.waypoint, undefined);
  t.deepEqual(waypointPod?.services, {
    'ns1/wp.ns1.svc.cluster.local': [{ servicePort: 15008, targetPort: 15008 }],
  });
  t.is(services.find((s) => s.name === 'wp')?.waypoint, undefined);
});

test('selector AuthorizationPolicies are listed on the workloads they select and converted by the hook', (t) => {
  const policy = `kind: AuthorizationPolicy
metadata: { name: deny-a, namespace: ns1 }
spec: { selector: { matchLabels: { app: a } }, action: DENY }
`;
  const store = new ConfigStore();
  store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1'), podYaml('b', '10.1.0.2'), policy].join('---\n'));
  const out = compile(store.view(), {
    trustDomain: 'cluster.local',
    convertPolicy: (raw) => ({
      name: String((raw.metadata as { name: string }).name),
      namespace: 'ns1',
      scope: 'WORKLOAD_SELECTOR',
      action: 'DENY',
      rules: [],
      dryRun: false,
    }),
  });
  // Then the default STRICT peer authentication (peer-authentication.test.ts).
  const strict = 'istio-system/istio_converted_static_strict';
  t.deepEqual(out.workloads.find((w) => w.name === 'a')?.authorizationPolicies, ['ns1/deny-a', strict]);
  t.deepEqual(out.workloads.find((w) => w.name === 'b')?.authorizationPolicies, [strict]);
  t.is(out.authorizations[0]?.name, 'deny-a');
});

const slice = (body: string) => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ext-1, namespace: ns1, labels: { kubernetes.io/service-name: ext } }
${body}`;
const EXT = `kind: Service
metadata: { name: ext, namespace: ns1 }
spec: { clusterIP: 10.96.0.20, ports: [{ name: db, port: 5432 }] }
`;

test('an EndpointSlice in YAML: a selector-less Service gets plain endpoints; a bad slice is refused with its path; FQDN slices add none', (t) => {
  const { workloads } = compiled(
    NAMESPACE_YAML,
    EXT,
    slice(`addressType: IPv4
ports: [{ name: db, port: 15432 }]
endpoints:
  - addresses: [192.0.2.7]
  - addresses: [192.0.2.8]
    conditions: { ready: false, serving: true, terminating: true }
`),
  );
  t.deepEqual(
    workloads.map((w) => [w.uid, w.tunnelProtocol, w.status, w.services['ns1/ext.ns1.svc.cluster.local']]),
    [
      [
        'Kubernetes/discovery.k8s.io/EndpointSlice/ns1/ext-1/192.0.2.7',
        'NONE',
        'HEALTHY',
        [{ servicePort: 5432, targetPort: 15432 }],
      ],
      [
        'Kubernetes/discovery.k8s.io/EndpointSlice/ns1/ext-1/192.0.2.8',
        'NONE',
        'UNHEALTHY',
        [{ servicePort: 5432, targetPort: 15432 }],
      ],
    ],
  );
  const store = new ConfigStore();
  const bad = store.applyYaml(
    [
      NAMESPACE_YAML,
      EXT,
      slice('addressType: IPv4\nendpoints: [{ addresses: [not-an-ip], conditions: { ready: "yes" } }]\n'),
    ].join('---\n'),
  );
  t.false(bad.ok);
  if (!bad.ok) {
    t.true(bad.error.some((r) => /endpoints\[0\]\.addresses\[0\]: "not-an-ip" is not an IP address/.test(r)));
    t.true(bad.error.some((r) => /endpoints\[0\]\.conditions\.ready: not a boolean/.test(r)));
  }
  t.is(store.view().objects.size, 0, 'nothing stored');
  const fqdn = compiled(
    NAMESPACE_YAML,
    EXT,
    slice('addressType: FQDN\nendpoints: [{ addresses: [db.example.org] }]\n'),
  );
  t.is(fqdn.workloads.length, 0);
});

test('pod status: the Ready condition decides when the Pod has conditions; none (YAML) is ready; being deleted or Pending is not', (t) => {
  const withStatus = (name: string, ip: string, extra: string, meta = '') =>
    podYaml(name, ip).replace(`  name: ${name}\n`, `  name: ${name}\n${meta}`) + extra;
  const { workloads } = compiled(
    NAMESPACE_YAML,
    podYaml('plain', '10.1.0.1'),
    withStatus('ready', '10.1.0.2', '  conditions: [{ type: Ready, status: "True" }]\n'),
    withStatus('unready', '10.1.0.3', '  conditions: [{ type: Ready, status: "False" }]\n'),
    withStatus('unknown', '10.1.0.4', '  conditions: [{ type: PodScheduled, status: "True" }]\n'),
    withStatus('pending', '10.1.0.5', '  phase: Pending\n'),
    withStatus(
      'deleting',
      '10.1.0.6',
      '  conditions: [{ type: Ready, status: "True" }]\n',
      '  deletionTimestamp: "2026-01-01T00:00:00Z"\n',
    ),
  );
  t.deepEqual(Object.fromEntries(workloads.map((w) => [w.name, w.status])), {
    plain: 'HEALTHY',
    ready: 'HEALTHY',
    unready: 'UNHEALTHY',
    unknown: 'UNHEALTHY',
    pending: 'UNHEALTHY',
    deleting: 'UNHEALTHY',
  });
  const store = new ConfigStore();
  const bad = store.applyYaml(
    [NAMESPACE_YAML, withStatus('x', '10.1.0.9', '  conditions: Ready\n')].join('---\n'),
  );
  t.false(bad.ok);
  t.true(!bad.ok && bad.error.some((r) => /status\.conditions: not a list/.test(r)));
});
