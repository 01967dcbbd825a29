/**
 * The Gateway API conformance expectations for GRPCRoute that apply to a mesh, ported as
 * data: each suite is one upstream test (kubernetes-sigs/gateway-api
 * `conformance/tests/grpcroute-*.go` and `conformance/tests/mesh/grpcroute-*.go`, with their
 * YAML), its route in zmesh's waypoint form, and each call with the backend and gRPC status
 * the upstream test expects. The upstream echo service `gateway_api_conformance...GrpcEcho`
 * is test/helpers/grpc-echo.ts's `zmesh.test.Echo` (same methods: Echo, EchoTwo, EchoThree);
 * grpc-infra-backend-v1/v2 (mesh: echo-v1/v2) are the fixture's server-v1/server-v2, and the
 * parent Service (`echo`, or the Gateway `same-namespace`) is `server`. The facts are the
 * upstream's; the table and runner are ours (test/grpcroute-conformance.test.ts), and what
 * is left out is in SKIPPED with the reason.
 */
import { ECHO_SERVICE } from '../helpers/grpc-echo.js';

export type Backend = 'server-v1' | 'server-v2';

export interface GrpcCase {
  method: 'Echo' | 'EchoTwo' | 'EchoThree';
  /** Request metadata (headers). */
  metadata?: Record<string, string>;
  /** gRPC status; default 0 (OK). */
  code?: number;
  /** The backend that must answer (none when the call fails before one). */
  backend?: Backend;
  /** Metadata the backend must have received, and metadata it must not have. */
  backendHeaders?: Record<string, string>;
  absentBackendHeaders?: string[];
}

export interface GrpcSuite {
  /** The upstream test's ShortName. */
  name: string;
  upstream: string;
  /** `grpcRoutes:` entries (YAML) attached to the service `server`. */
  routes: string;
  cases: GrpcCase[];
  /** A weighted split instead of cases: the share each backend must get (upstream: ±5%). */
  weights?: Record<Backend, number>;
}

const PARENT = 'parentRefs: [{ group: "", kind: Service, name: server, port: 80 }]';
const v1 = '[{ name: server-v1, port: 80 }]';
const v2 = '[{ name: server-v2, port: 80 }]';
const UNIMPLEMENTED = 12;
const UNAVAILABLE = 14;
const method = (m: string) => `{ service: ${ECHO_SERVICE}, method: ${m} }`;

export const SUITES: GrpcSuite[] = [
  {
    name: 'GRPCExactMethodMatching',
    upstream: 'conformance/tests/grpcroute-exact-method-matching.{go,yaml}',
    routes: `
  - name: exact-matching
    ${PARENT}
    rules:
      - matches: [{ method: ${method('Echo')} }]
        backendRefs: ${v1}
      - matches: [{ method: ${method('EchoTwo')} }]
        backendRefs: ${v2}
`,
    cases: [
      { method: 'Echo', backend: 'server-v1' },
      { method: 'EchoTwo', backend: 'server-v2' },
      { method: 'EchoThree', code: UNIMPLEMENTED },
    ],
  },
  {
    name: 'GRPCRouteHeaderMatching',
    upstream: 'conformance/tests/grpcroute-header-matching.{go,yaml}',
    routes: `
  - name: grpc-header-matching
    ${PARENT}
    rules:
      - matches: [{ headers: [{ name: version, value: one }] }]
        backendRefs: ${v1}
      - matches: [{ headers: [{ name: version, value: two }] }]
        backendRefs: ${v2}
      - matches: [{ headers: [{ name: version, value: two }, { name: color, value: orange }] }]
        backendRefs: ${v1}
      - matches: [{ headers: [{ name: color, value: blue }] }, { headers: [{ name: color, value: green }] }]
        backendRefs: ${v1}
      - matches: [{ headers: [{ name: color, value: red }] }, { headers: [{ name: color, value: yellow }] }]
        backendRefs: ${v2}
`,
    cases: [
      { method: 'Echo', metadata: { Version: 'one' }, backend: 'server-v1' },
      { method: 'Echo', metadata: { Version: 'two' }, backend: 'server-v2' },
      { method: 'Echo', metadata: { Version: 'two', Color: 'orange' }, backend: 'server-v1' },
      { method: 'Echo', metadata: { Version: 'two', Color: 'blue' }, backend: 'server-v2' },
      { method: 'Echo', metadata: { Color: 'orange' }, code: UNIMPLEMENTED },
      { method: 'Echo', metadata: { 'Some-Other-Header': 'one' }, code: UNIMPLEMENTED },
      { method: 'Echo', metadata: { Color: 'blue' }, backend: 'server-v1' },
      { method: 'Echo', metadata: { Color: 'green' }, backend: 'server-v1' },
      { method: 'Echo', metadata: { Color: 'red' }, backend: 'server-v2' },
      { method: 'Echo', metadata: { Color: 'yellow' }, backend: 'server-v2' },
      { method: 'Echo', metadata: { Color: 'purple' }, code: UNIMPLEMENTED },
    ],
  },
  {
    name: 'GRPCRouteNamedRule',
    upstream: 'conformance/tests/grpcroute-named-rule.{go,yaml}',
    routes: `
  - name: grpc-named-rules
    ${PARENT}
    rules:
      - name: echo-rule
        matches: [{ method: ${method('Echo')} }]
        backendRefs: ${v1}
      - name: echo-two-rule
        matches: [{ method: ${method('EchoTwo')} }]
        backendRefs: ${v2}
`,
    cases: [
      { method: 'Echo', backend: 'server-v1' },
      { method: 'EchoTwo', backend: 'server-v2' },
    ],
  },
  {
    name: 'GRPCRouteAllBackendsWeightZero',
    upstream: 'conformance/tests/grpcroute-all-backends-weight-zero.{go,yaml}',
    routes: `
  - name: all-backends-weight-zero
    ${PARENT}
    rules:
      - backendRefs: [{ name: server-v1, port: 80, weight: 0 }, { name: server-v2, port: 80, weight: 0 }]
`,
    cases: [{ method: 'Echo', code: UNAVAILABLE }],
  },
  {
    name: 'MeshGRPCRouteWeight',
    upstream: 'conformance/tests/mesh/grpcroute-weight.{go,yaml} (and grpcroute-weight.go: 70/30)',
    routes: `
  - name: mesh-grpc-weighted-backends
    ${PARENT}
    rules:
      - backendRefs: [{ name: server-v1, port: 80, weight: 70 }, { name: server-v2, port: 80, weight: 30 }]
`,
    cases: [{ method: 'Echo' }],
    weights: { 'server-v1': 0.7, 'server-v2': 0.3 },
  },
];

export const SKIPPED: Array<{ name: string; upstream: string; reason: string }> = [
  {
    name: 'GRPCRouteListenerHostnameMatching, GRPCRouteMultipleRoutesAttachmentSameHostnameIntersection',
    upstream:
      'conformance/tests/grpcroute-listener-hostname-matching.go, grpcroute-*-hostname-intersection.go',
    reason: 'Gateway listeners and their hostnames: a mesh route binds to a Service, which has no listeners',
  },
  {
    name: 'MeshGRPCRouteRequestMirror, GRPCRouteRequestMirror',
    upstream: 'conformance/tests/mesh/grpcroute-request-mirror.go',
    reason:
      'GRPCRoute RequestMirror is served by the same code as HTTPRoute RequestMirror (test/httproute-conformance.test.ts); the gRPC copy is not checked end to end here',
  },
  {
    name: 'GRPCRouteSessionPersistenceCookie',
    upstream: 'conformance/tests/grpcroute-session-persistence-cookie.go',
    reason: 'sessionPersistence (extended) is not implemented: the field is refused at apply',
  },
  {
    name: 'BackendTLSPolicyGRPCRoute',
    upstream: 'conformance/tests/backendtlspolicy-grpcroute.go',
    reason: 'BackendTLSPolicy is not a zmesh kind: the waypoint reaches every backend over HBONE mTLS',
  },
  {
    name: 'GRPCRouteHTTPRouteFilter',
    upstream: 'Envoy Gateway extension test (extensionRef to HTTPRouteFilter)',
    reason: 'ExtensionRef filters are implementation-specific; zmesh refuses them',
  },
];
