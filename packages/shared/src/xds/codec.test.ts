import test from 'ava';
import type { Authorization } from '../authz/policy-model.js';
import type { Service, Workload } from '../model/workload.js';
import {
  decodeAddress,
  decodeAuthorization,
  encodeAddress,
  encodeAuthorization,
  encodeMessage,
} from './codec.js';

// Protobuf wire arithmetic (protobuf.dev/programming-guides/encoding): a tag is
// (field << 3) | wire type; 0 = varint, 2 = length-delimited.
function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}
const vint = (field: number, n: number) => [...varint((field << 3) | 0), ...varint(n)];
const len = (field: number, bytes: number[]) => [
  ...varint((field << 3) | 2),
  ...varint(bytes.length),
  ...bytes,
];
const str = (field: number, s: string) => len(field, [...Buffer.from(s, 'utf8')]);
const hex = (bytes: number[] | Uint8Array) => Buffer.from(bytes).toString('hex');

const workload: Workload = {
  uid: 'Kubernetes//Pod/ns1/a',
  name: 'a',
  namespace: 'ns1',
  addresses: ['10.0.0.1'],
  network: '',
  node: 'n1',
  trustDomain: 'cluster.local',
  serviceAccount: 'sa',
  tunnelProtocol: 'HBONE',
  services: { 'ns1/s': [{ servicePort: 80, targetPort: 8080 }] },
  authorizationPolicies: [],
  status: 'HEALTHY',
  canonicalName: '',
  canonicalRevision: '',
  workloadName: '',
  clusterId: '',
};

const service: Service = {
  name: 's',
  namespace: 'ns1',
  hostname: 's.ns1.svc.cluster.local',
  addresses: [{ network: '', address: '10.96.0.1' }],
  ports: [{ servicePort: 80, targetPort: 8080, appProtocol: 'HTTP11' }],
  subjectAltNames: [],
  waypoint: { hostname: { namespace: 'ns1', hostname: 'wp.ns1.svc.cluster.local' }, hbonePort: 15008 },
};

const policy: Authorization = {
  name: 'deny-a',
  namespace: 'ns1',
  scope: 'WORKLOAD_SELECTOR',
  action: 'DENY',
  dryRun: true,
  rules: [
    {
      clauses: [
        {
          matches: [
            {
              namespaces: [],
              notNamespaces: [{ presence: {} }],
              serviceAccounts: [],
              notServiceAccounts: [],
              principals: [{ exact: 'cluster.local/ns/ns1/sa/a' }],
              notPrincipals: [],
              sourceIps: [{ address: '10.0.0.0', length: 8 }],
              notSourceIps: [],
              destinationIps: [],
              notDestinationIps: [],
              destinationPorts: [80, 443],
              notDestinationPorts: [],
            },
          ],
        },
      ],
    },
  ],
};

test('a small Workload encodes to hand-built bytes, in field-number order, defaults omitted', (t) => {
  const port = [...vint(1, 80), ...vint(2, 8080)];
  const entry = [...str(1, 'ns1/s'), ...len(2, len(1, port))];
  const body = [
    ...str(1, 'a'),
    ...str(2, 'ns1'),
    ...len(3, [10, 0, 0, 1]),
    ...vint(5, 1), // tunnel_protocol HBONE
    ...str(6, 'cluster.local'),
    ...str(7, 'sa'),
    ...str(9, 'n1'),
    ...str(20, 'Kubernetes//Pod/ns1/a'),
    ...len(22, entry),
  ];
  const expected = len(1, body);
  t.is(hex(encodeAddress({ kind: 'workload', workload })), hex(expected));
  t.deepEqual(decodeAddress(Uint8Array.from(expected)), { ok: true, value: { kind: 'workload', workload } });
});

test('a small Service encodes to hand-built bytes', (t) => {
  const body = [
    ...str(1, 's'),
    ...str(2, 'ns1'),
    ...str(3, 's.ns1.svc.cluster.local'),
    ...len(4, len(2, [10, 96, 0, 1])),
    ...len(5, [...vint(1, 80), ...vint(2, 8080), ...vint(3, 1)]),
    ...len(7, [...len(1, [...str(1, 'ns1'), ...str(2, 'wp.ns1.svc.cluster.local')]), ...vint(3, 15008)]),
  ];
  const expected = len(2, body);
  t.is(hex(encodeAddress({ kind: 'service', service })), hex(expected));
  t.deepEqual(decodeAddress(Uint8Array.from(expected)), { ok: true, value: { kind: 'service', service } });
});

test('an Authorization encodes to hand-built bytes (Clause.matches is field 2, ports packed)', (t) => {
  const match = [
    ...len(2, len(4, [])), // not_namespaces: presence = Empty
    ...len(3, str(1, 'cluster.local/ns/ns1/sa/a')),
    ...len(5, [...len(1, [10, 0, 0, 0]), ...vint(2, 8)]),
    ...len(9, [...varint(80), ...varint(443)]),
  ];
  const expected = [
    ...str(1, 'deny-a'),
    ...str(2, 'ns1'),
    ...vint(3, 2),
    ...vint(4, 1),
    ...len(5, len(1, len(2, match))),
    ...vint(6, 1),
  ];
  t.is(hex(encodeAuthorization(policy)), hex(expected));
  t.deepEqual(decodeAuthorization(Uint8Array.from(expected)), { ok: true, value: policy });
});

test('IPv6 addresses decode to RFC 5952 text; IPv4-mapped ones fold to IPv4 (the model keys one address one way)', (t) => {
  const w = { ...workload, addresses: ['2001:0db8:0::1', '::ffff:10.0.0.1'] };
  const decoded = decodeAddress(encodeAddress({ kind: 'workload', workload: w }));
  t.deepEqual(decoded, {
    ok: true,
    value: { kind: 'workload', workload: { ...w, addresses: ['2001:db8::1', '10.0.0.1'] } },
  });
});

test('labels ride in the zmesh.io/labels extension and round-trip', (t) => {
  const w = { ...workload, labels: { 'zmesh.io/tenant': 'blue' } };
  t.deepEqual(decodeAddress(encodeAddress({ kind: 'workload', workload: w })), {
    ok: true,
    value: { kind: 'workload', workload: w },
  });
});

const badWorkloads: Array<[string, object, string[]]> = [
  ['empty uid', { uid: '' }, ['workload.uid: must not be empty']],
  ['5-byte address', { addresses: [new Uint8Array(5)] }, ['workload.addresses[0]: 5 bytes, want 4 or 16']],
  ['bad namespace', { namespace: 'Not_OK' }, ['workload.namespace: "Not_OK" is not a DNS-1123 label']],
  [
    'bad service account',
    { serviceAccount: 'a/b' },
    ['workload.service_account: "a/b" is not a DNS-1123 subdomain'],
  ],
  [
    'bad trust domain',
    { trustDomain: 'Cluster Local' },
    ['workload.trust_domain: "Cluster Local" is not a SPIFFE trust domain'],
  ],
  ['unknown tunnel', { tunnelProtocol: 7 }, ['workload.tunnel_protocol: unknown value 7']],
  ['legacy tunnel', { tunnelProtocol: 2 }, ['workload.tunnel_protocol: LEGACY_ISTIO_MTLS is not supported']],
  ['unknown status', { status: 9 }, ['workload.status: unknown value 9']],
  [
    'port 0 and 70000',
    { services: { 'ns1/s': { ports: [{ servicePort: 0, targetPort: 70000 }] } } },
    [
      'workload.services["ns1/s"].ports[0].service_port: 0 is not a port in 1..65535',
      'workload.services["ns1/s"].ports[0].target_port: 70000 is not a port in 1..65535',
    ],
  ],
  [
    'bad services key',
    { services: { nokey: { ports: [] } } },
    ['workload.services["nokey"]: key is not namespace/hostname'],
  ],
  [
    'waypoint without destination',
    { waypoint: { hboneMtlsPort: 15008 } },
    ['workload.waypoint: neither hostname nor address is set'],
  ],
  [
    'waypoint without port',
    { waypoint: { hostname: { namespace: 'ns1', hostname: 'wp' } } },
    ['workload.waypoint.hbone_mtls_port: 0 is not a port in 1..65535'],
  ],
];

for (const [name, patch, reasons] of badWorkloads) {
  test(`an invalid Workload is refused with its reason: ${name}`, (t) => {
    const base = {
      uid: 'u',
      name: 'a',
      namespace: 'ns1',
      trustDomain: 'cluster.local',
      serviceAccount: 'sa',
      tunnelProtocol: 1,
    };
    const bytes = encodeMessage('istio.workload.Address', { workload: { ...base, ...patch } });
    t.deepEqual(decodeAddress(bytes), { ok: false, error: reasons });
  });
}

test('every invalid field of one resource is reported at once', (t) => {
  const bytes = encodeMessage('istio.workload.Address', {
    workload: {
      uid: '',
      name: 'a',
      namespace: 'NS',
      addresses: [new Uint8Array(3)],
      trustDomain: 'td',
      serviceAccount: 'sa',
    },
  });
  const result = decodeAddress(bytes);
  t.false(result.ok);
  if (!result.ok) t.is(result.error.length, 3);
});

test('garbage bytes and an empty Address are reasons, not exceptions', (t) => {
  const garbage = decodeAddress(Uint8Array.from([0x0a, 0xff, 0xff]));
  t.false(garbage.ok);
  if (!garbage.ok) t.regex(garbage.error[0]!, /^malformed istio.workload.Address/);
  t.deepEqual(decodeAddress(new Uint8Array()), {
    ok: false,
    error: ['address: neither workload nor service is set'],
  });
});

test('an invalid Service and Authorization list their reasons', (t) => {
  const svc = encodeMessage('istio.workload.Address', {
    service: {
      name: 's',
      namespace: 'ns1',
      hostname: '',
      addresses: [{ address: new Uint8Array(2) }],
      visibility: 5,
    },
  });
  t.deepEqual(decodeAddress(svc), {
    ok: false,
    error: [
      'service.visibility: unknown value 5',
      'service.hostname: must not be empty',
      'service.addresses[0].address: 2 bytes, want 4 or 16',
    ],
  });
  const authz = encodeMessage('istio.security.Authorization', {
    name: 'p',
    namespace: 'ns1',
    action: 3,
    rules: [
      {
        clauses: [
          {
            matches: [
              {
                principals: [{}],
                sourceIps: [{ address: new Uint8Array(4), length: 33 }],
                destinationPorts: [0],
              },
            ],
          },
        ],
      },
    ],
  });
  const m = 'authorization.rules[0].clauses[0].matches[0]';
  t.deepEqual(decodeAuthorization(authz), {
    ok: false,
    error: [
      'authorization.action: unknown value 3',
      `${m}.principals[0]: no match_type set`,
      `${m}.source_ips[0].length: 33 exceeds 32`,
      `${m}.destination_ports[0]: 0 is not a port in 1..65535`,
    ],
  });
});
