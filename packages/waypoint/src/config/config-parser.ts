import {
  checkUnique,
  DEFAULT_TRUST_DOMAIN,
  DNS_LABEL,
  err,
  FieldReader,
  ok,
  parseYamlText,
  type Result,
  readPolicy,
  readRequestAuthn,
  readService,
  readWorkload,
  readYamlFile,
  serviceKey,
} from '@zmesh/shared';
import { readGrpcRoute } from './grpc-route-parser.js';
import { readBackendPolicy } from './policy-parser.js';
import { readRoute } from './route-parser.js';
import type { HttpRoute, WaypointConfig } from './waypoint-config.js';

const ROOT_KEYS = [
  'waypoint',
  'workloads',
  'services',
  'httpRoutes',
  'grpcRoutes',
  'authorizationPolicies',
  'requestAuthentications',
  'backendPolicies',
];

export async function loadWaypointConfig(file: string): Promise<Result<WaypointConfig>> {
  const doc = await readYamlFile(file);
  return doc.ok ? decodeWaypointConfig(doc.value, file) : doc;
}

/** YAML text → config, or every reason it is refused. Never throws. */
export function parseWaypointConfig(text: string, source: string): Result<WaypointConfig> {
  const doc = parseYamlText(text, source);
  return doc.ok ? decodeWaypointConfig(doc.value, source) : doc;
}

/** A plain object (parsed YAML or JSON, or a control plane's compiled form) → config. */
export function decodeWaypointConfig(doc: unknown, source: string): Result<WaypointConfig> {
  const r = new FieldReader(source);
  const root = r.object(doc, '$');
  if (!root) return err(r.reasons);
  r.onlyKeys(root, '$', ROOT_KEYS);
  const self = r.object(root.waypoint ?? {}, 'waypoint') ?? {};
  r.onlyKeys(self, 'waypoint', ['name', 'namespace', 'trustDomain', 'serviceAccount']);
  const name = r.string(self.name, 'waypoint.name', { pattern: DNS_LABEL }) ?? '';
  const namespace = r.string(self.namespace, 'waypoint.namespace', { pattern: DNS_LABEL }) ?? '';
  const cfg: WaypointConfig = {
    name,
    namespace,
    trustDomain:
      r.string(self.trustDomain, 'waypoint.trustDomain', { optional: true }) ?? DEFAULT_TRUST_DOMAIN,
    serviceAccount: r.string(self.serviceAccount, 'waypoint.serviceAccount', { optional: true }) ?? name,
    workloads: r
      .array(root.workloads, 'workloads')
      .flatMap((w, i) => readWorkload(r, w, `workloads[${i}]`, { requireNode: false }) ?? []),
    services: r.array(root.services, 'services').flatMap((s, i) => readService(r, s, `services[${i}]`) ?? []),
    routes: r
      .array(root.httpRoutes, 'httpRoutes')
      .flatMap((x, i) => readRoute(r, x, `httpRoutes[${i}]`, namespace) ?? []),
    grpcRoutes: r
      .array(root.grpcRoutes, 'grpcRoutes')
      .flatMap((x, i) => readGrpcRoute(r, x, `grpcRoutes[${i}]`, namespace) ?? []),
    policies: r
      .array(root.authorizationPolicies, 'authorizationPolicies')
      .flatMap((x, i) => readPolicy(r, x, `authorizationPolicies[${i}]`, { name, namespace }) ?? []),
    requestAuthentications: r
      .array(root.requestAuthentications, 'requestAuthentications')
      .flatMap((x, i) => readRequestAuthn(r, x, `requestAuthentications[${i}]`, { name, namespace }) ?? []),
    backendPolicies: r
      .array(root.backendPolicies, 'backendPolicies')
      .flatMap((x, i) => readBackendPolicy(r, x, `backendPolicies[${i}]`) ?? []),
  };
  checkReferences(r, cfg);
  return r.reasons.length > 0 ? err(r.reasons) : ok(cfg);
}

function checkReferences(r: FieldReader, cfg: WaypointConfig): void {
  checkUnique(
    r,
    cfg.workloads.map((w) => w.uid),
    'workloads',
    'uid',
  );
  checkUnique(r, cfg.services.map(serviceKey), 'services', 'namespace/hostname');
  const byName = new Set(cfg.services.map((s) => `${s.namespace}/${s.name}`));
  const check = (routes: readonly HttpRoute[], key: string) =>
    routes.forEach((route, i) => {
      route.parentRefs.forEach((p, j) => {
        if (!byName.has(`${p.namespace}/${p.name}`))
          r.fail(`${key}[${i}].parentRefs[${j}]`, `no service ${p.namespace}/${p.name}`);
      });
      // A backendRef naming no service is not a refusal: Gateway API keeps the route
      // (ResolvedRefs=False, BackendNotFound) and answers 500 for the traffic it would have
      // taken (request-handler). The control plane refuses such a route at apply.
    });
  check(cfg.routes, 'httpRoutes');
  check(cfg.grpcRoutes, 'grpcRoutes');
}
