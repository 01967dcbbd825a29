import type { FieldReader } from '@zmesh/shared';
import {
  type BackendPolicy,
  DEFAULT_CIRCUIT_BREAKER,
  DEFAULT_OUTLIER,
  type L7Policy,
  type PolicyCondition,
  type PolicyOperation,
  type PolicyRule,
  type PolicySource,
} from './waypoint-config.js';

const HEADER_KEY = /^request\.headers\[([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\]$/;

/**
 * An Istio AuthorizationPolicy. Only those whose targetRefs name this waypoint (kind
 * Gateway) or a Service are the waypoint's; the rest (selector or namespace policies) are
 * ztunnel's and are skipped, which is not an error.
 */
export function readPolicy(
  r: FieldReader,
  value: unknown,
  path: string,
  self: { name: string; namespace: string },
): L7Policy | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'targetRefs', 'action', 'rules']);
  const name = r.string(o.name, `${path}.name`) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { optional: true }) ?? self.namespace;
  const action = r.oneOf(o.action, `${path}.action`, ['ALLOW', 'DENY'] as const, 'ALLOW');
  const rules = r
    .array(o.rules, `${path}.rules`)
    .flatMap((x, i) => readRule(r, x, `${path}.rules[${i}]`) ?? []);
  let targetsGateway = false;
  const targetServices: string[] = [];
  r.array(o.targetRefs, `${path}.targetRefs`).forEach((t, i) => {
    const q = r.object(t, `${path}.targetRefs[${i}]`);
    if (!q) return;
    r.onlyKeys(q, `${path}.targetRefs[${i}]`, ['kind', 'group', 'name', 'namespace']);
    const kind = r.oneOf(q.kind, `${path}.targetRefs[${i}].kind`, ['Gateway', 'Service'] as const, 'Gateway');
    const target = r.string(q.name, `${path}.targetRefs[${i}].name`);
    if (kind === 'Gateway' && target === self.name && namespace === self.namespace) targetsGateway = true;
    if (kind === 'Service' && target) targetServices.push(`${namespace}/${target}`);
  });
  if (!targetsGateway && targetServices.length === 0) return undefined;
  return { name, namespace, action, rules, ...(targetsGateway ? {} : { targetServices }) };
}

function readRule(r: FieldReader, value: unknown, path: string): PolicyRule | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['from', 'to', 'when']);
  const from = r.array(o.from, `${path}.from`).flatMap((f, i) => {
    const src = r.object(r.object(f, `${path}.from[${i}]`)?.source, `${path}.from[${i}].source`);
    return src ? [readSource(r, src, `${path}.from[${i}].source`)] : [];
  });
  const to = r.array(o.to, `${path}.to`).flatMap((t, i) => {
    const op = r.object(r.object(t, `${path}.to[${i}]`)?.operation, `${path}.to[${i}].operation`);
    return op ? [readOperation(r, op, `${path}.to[${i}].operation`)] : [];
  });
  const when = r
    .array(o.when, `${path}.when`)
    .flatMap((w, i) => readCondition(r, w, `${path}.when[${i}]`) ?? []);
  return { from, to, when };
}

function readSource(r: FieldReader, o: Record<string, unknown>, path: string): PolicySource {
  r.onlyKeys(o, path, ['principals', 'notPrincipals', 'namespaces', 'notNamespaces']);
  const out: PolicySource = {};
  for (const k of ['principals', 'notPrincipals', 'namespaces', 'notNamespaces'] as const) {
    const v = r.strings(o[k], `${path}.${k}`);
    if (v) out[k] = v;
  }
  return out;
}

function readOperation(r: FieldReader, o: Record<string, unknown>, path: string): PolicyOperation {
  const text = ['methods', 'notMethods', 'paths', 'notPaths', 'hosts', 'notHosts'] as const;
  r.onlyKeys(o, path, [...text, 'ports', 'notPorts']);
  const out: PolicyOperation = {};
  for (const k of text) {
    const v = r.strings(o[k], `${path}.${k}`);
    if (v) out[k] = v;
  }
  for (const k of ['ports', 'notPorts'] as const) {
    if (o[k] === undefined) continue;
    // Istio writes ports as strings.
    out[k] = r.array(o[k], `${path}.${k}`).flatMap((p, i) => r.port(Number(p), `${path}.${k}[${i}]`) ?? []);
  }
  return out;
}

function readCondition(r: FieldReader, value: unknown, path: string): PolicyCondition | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['key', 'values', 'notValues']);
  const key = r.string(o.key, `${path}.key`);
  const m = key ? HEADER_KEY.exec(key) : null;
  if (key && !m) return r.fail(`${path}.key`, 'only request.headers[<name>] is supported');
  const values = r.strings(o.values, `${path}.values`);
  const notValues = r.strings(o.notValues, `${path}.notValues`);
  if (!values && !notValues) r.fail(path, 'needs values or notValues');
  if (!m) return undefined;
  return { header: m[1]!.toLowerCase(), ...(values ? { values } : {}), ...(notValues ? { notValues } : {}) };
}

export function readBackendPolicy(r: FieldReader, value: unknown, path: string): BackendPolicy | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['service', 'loadBalancer', 'circuitBreaker', 'outlierDetection']);
  const service = r.string(o.service, `${path}.service`, { pattern: /^[^/]+\/[^/]+$/ }) ?? '';
  const cb = r.optionalObject(o.circuitBreaker, `${path}.circuitBreaker`) ?? {};
  r.onlyKeys(cb, `${path}.circuitBreaker`, ['maxConnections', 'maxPendingRequests', 'maxRequests']);
  const od = r.optionalObject(o.outlierDetection, `${path}.outlierDetection`) ?? {};
  r.onlyKeys(od, `${path}.outlierDetection`, [
    'consecutive5xx',
    'interval',
    'baseEjectionTime',
    'maxEjectionTime',
    'maxEjectionPercent',
  ]);
  const big = 1_000_000;
  const d = DEFAULT_CIRCUIT_BREAKER;
  const e = DEFAULT_OUTLIER;
  return {
    service,
    loadBalancer: r.oneOf(
      o.loadBalancer,
      `${path}.loadBalancer`,
      ['ROUND_ROBIN', 'LEAST_REQUEST'] as const,
      'ROUND_ROBIN',
    ),
    circuitBreaker: {
      maxConnections:
        r.int(cb.maxConnections, `${path}.circuitBreaker.maxConnections`, 1, big, d.maxConnections) ?? 1,
      maxPendingRequests:
        r.int(
          cb.maxPendingRequests,
          `${path}.circuitBreaker.maxPendingRequests`,
          0,
          big,
          d.maxPendingRequests,
        ) ?? 0,
      maxRequests: r.int(cb.maxRequests, `${path}.circuitBreaker.maxRequests`, 1, big, d.maxRequests) ?? 1,
    },
    outlier: {
      consecutive5xx:
        r.int(od.consecutive5xx, `${path}.outlierDetection.consecutive5xx`, 0, big, e.consecutive5xx) ?? 0,
      intervalMs: r.duration(od.interval, `${path}.outlierDetection.interval`, e.intervalMs) ?? e.intervalMs,
      baseEjectionMs:
        r.duration(od.baseEjectionTime, `${path}.outlierDetection.baseEjectionTime`, e.baseEjectionMs) ?? 0,
      maxEjectionMs:
        r.duration(od.maxEjectionTime, `${path}.outlierDetection.maxEjectionTime`, e.maxEjectionMs) ?? 0,
      maxEjectionPercent:
        r.int(
          od.maxEjectionPercent,
          `${path}.outlierDetection.maxEjectionPercent`,
          0,
          100,
          e.maxEjectionPercent,
        ) ?? 0,
    },
  };
}
