import { createPublicKey } from 'node:crypto';
import { type Cidr, type FieldReader, parseCidr } from '@zmesh/shared';
import { jwksUriRefusal } from '../authz/jwks-fetch.js';
import {
  type BackendPolicy,
  type ConditionAttr,
  DEFAULT_CIRCUIT_BREAKER,
  DEFAULT_OUTLIER,
  type JwtLocation,
  type JwtRule,
  type L7Policy,
  type PolicyCondition,
  type PolicyOperation,
  type PolicyRule,
  type PolicySource,
  type RequestAuthn,
} from './waypoint-config.js';

const TOKEN = "[!#$%&'*+\\-.^_`|~0-9A-Za-z]+";
const HEADER_KEY = new RegExp(`^request\\.headers\\[(${TOKEN})\\]$`);
/** `request.auth.claims[a]` or nested `request.auth.claims[a][b]`. */
const CLAIM_KEY = /^request\.auth\.claims((?:\[[^[\]]+\])+)$/;
const SIMPLE_KEYS: Record<string, ConditionAttr> = {
  'request.auth.principal': { kind: 'requestPrincipal' },
  'request.auth.audiences': { kind: 'audiences' },
  'request.auth.presenter': { kind: 'presenter' },
  'source.principal': { kind: 'sourcePrincipal' },
  'source.namespace': { kind: 'sourceNamespace' },
  'source.ip': { kind: 'sourceIp' },
  'remote.ip': { kind: 'remoteIp' },
  'destination.ip': { kind: 'destinationIp' },
  'destination.port': { kind: 'destinationPort' },
};
const SUPPORTED_KEYS = `request.headers[<name>], request.auth.claims[<claim>]..., ${Object.keys(SIMPLE_KEYS).join(', ')}`;

/** Where the waypoint's targetRefs point: this Gateway, and/or Services by `namespace/name`. */
function readTargets(
  r: FieldReader,
  refs: unknown,
  path: string,
  namespace: string,
  self: { name: string; namespace: string },
): { targetsGateway: boolean; targetServices: string[] } {
  let targetsGateway = false;
  const targetServices: string[] = [];
  r.array(refs, path).forEach((t, i) => {
    const q = r.object(t, `${path}[${i}]`);
    if (!q) return;
    r.onlyKeys(q, `${path}[${i}]`, ['kind', 'group', 'name', 'namespace']);
    const kind = r.oneOf(q.kind, `${path}[${i}].kind`, ['Gateway', 'Service'] as const, 'Gateway');
    const target = r.string(q.name, `${path}[${i}].name`);
    if (kind === 'Gateway' && target === self.name && namespace === self.namespace) targetsGateway = true;
    if (kind === 'Service' && target) targetServices.push(`${namespace}/${target}`);
  });
  return { targetsGateway, targetServices };
}

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
  if (o.action === 'CUSTOM')
    r.fail(`${path}.action`, 'CUSTOM (external authorization) is not supported by the zmesh waypoint');
  const action = r.oneOf(o.action, `${path}.action`, ['ALLOW', 'DENY', 'AUDIT'] as const, 'ALLOW');
  const rules = r
    .array(o.rules, `${path}.rules`)
    .flatMap((x, i) => readRule(r, x, `${path}.rules[${i}]`) ?? []);
  const { targetsGateway, targetServices } = readTargets(
    r,
    o.targetRefs,
    `${path}.targetRefs`,
    namespace,
    self,
  );
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

const SOURCE_STRINGS = [
  'principals',
  'notPrincipals',
  'namespaces',
  'notNamespaces',
  'requestPrincipals',
  'notRequestPrincipals',
] as const;
const SOURCE_BLOCKS = ['ipBlocks', 'notIpBlocks', 'remoteIpBlocks', 'notRemoteIpBlocks'] as const;

function readSource(r: FieldReader, o: Record<string, unknown>, path: string): PolicySource {
  r.onlyKeys(o, path, [...SOURCE_STRINGS, ...SOURCE_BLOCKS]);
  const out: PolicySource = {};
  for (const k of SOURCE_STRINGS) {
    const v = wildcards(r, o[k], `${path}.${k}`);
    if (v) out[k] = v;
  }
  for (const k of SOURCE_BLOCKS) {
    const v = cidrs(r, o[k], `${path}.${k}`);
    if (v) out[k] = v;
  }
  return out;
}

function readOperation(r: FieldReader, o: Record<string, unknown>, path: string): PolicyOperation {
  const text = ['methods', 'notMethods', 'paths', 'notPaths', 'hosts', 'notHosts'] as const;
  r.onlyKeys(o, path, [...text, 'ports', 'notPorts']);
  const out: PolicyOperation = {};
  for (const k of text) {
    const v = wildcards(r, o[k], `${path}.${k}`);
    if (!v) continue;
    if (k === 'paths' || k === 'notPaths')
      v.forEach((p, i) => {
        if (p.includes('{'))
          r.fail(`${path}.${k}[${i}]`, `${JSON.stringify(p)}: path templates ({*}, {**}) are not supported`);
        else if (p !== '*' && !p.startsWith('/') && !p.startsWith('*'))
          r.fail(
            `${path}.${k}[${i}]`,
            `${JSON.stringify(p)}: a path starts with / (or * for a suffix match)`,
          );
      });
    out[k] = v;
  }
  for (const k of ['ports', 'notPorts'] as const) {
    if (o[k] === undefined) continue;
    out[k] = ports(r, o[k], `${path}.${k}`);
  }
  return out;
}

/** Istio writes ports as strings; YAML may give numbers. Decimal 1..65535 only. */
function ports(r: FieldReader, v: unknown, path: string): number[] {
  return r.array(v, path).flatMap((p, i) => {
    const n =
      typeof p === 'number' ? p : typeof p === 'string' && /^\d{1,5}$/.test(p) ? Number(p) : Number.NaN;
    return r.port(n, `${path}[${i}]`) ?? [];
  });
}

/** Istio's string forms: `*` any non-empty value, `x*` prefix, `*x` suffix, else exact; nowhere else. */
function wildcards(r: FieldReader, v: unknown, path: string): string[] | undefined {
  const list = r.strings(v, path);
  list?.forEach((s, i) => {
    if (s !== '*' && (s.slice(1, -1).includes('*') || (s.startsWith('*') && s.endsWith('*'))))
      r.fail(`${path}[${i}]`, `${JSON.stringify(s)} has a * other than at the start or the end`);
  });
  return list;
}

/** CIDRs (or bare addresses) through the project's one IP parser. */
function cidrs(r: FieldReader, v: unknown, path: string): Cidr[] | undefined {
  const list = r.strings(v, path);
  return list?.flatMap((s, i) => {
    const c = parseCidr(s);
    if (typeof c === 'string') return r.fail(`${path}[${i}]`, c) ?? [];
    return [c];
  });
}

function readCondition(r: FieldReader, value: unknown, path: string): PolicyCondition | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['key', 'values', 'notValues']);
  const key = r.string(o.key, `${path}.key`);
  if (o.values === undefined && o.notValues === undefined) r.fail(path, 'needs values or notValues');
  if (!key) return undefined;
  const attr = conditionAttr(key);
  if (!attr)
    return r.fail(`${path}.key`, `${JSON.stringify(key)} is not supported; use one of ${SUPPORTED_KEYS}`);
  const cond: PolicyCondition = { key, attr };
  for (const [field, ipField] of [
    ['values', 'cidrs'],
    ['notValues', 'notCidrs'],
  ] as const) {
    const p = `${path}.${field}`;
    if (o[field] === undefined) continue;
    if (attr.kind === 'sourceIp' || attr.kind === 'remoteIp' || attr.kind === 'destinationIp')
      cond[ipField] = cidrs(r, o[field], p) ?? [];
    else if (attr.kind === 'destinationPort') cond[field] = ports(r, o[field], p).map(String);
    else cond[field] = wildcards(r, o[field], p) ?? [];
  }
  return cond;
}

function conditionAttr(key: string): ConditionAttr | undefined {
  const simple = SIMPLE_KEYS[key];
  if (simple) return simple;
  const header = HEADER_KEY.exec(key);
  if (header) return { kind: 'header', name: header[1]!.toLowerCase() };
  const claim = CLAIM_KEY.exec(key);
  if (claim) return { kind: 'claim', path: claim[1]!.slice(1, -1).split('][') };
  return undefined;
}

/** Istio's default token locations: `Authorization: Bearer <token>`, then `?access_token=`. */
const DEFAULT_LOCATIONS: JwtLocation[] = [
  { header: 'authorization', prefix: 'Bearer ' },
  { param: 'access_token' },
];
/** Istio's default jwksUri fetch timeout. */
const DEFAULT_JWKS_TIMEOUT_MS = 5000;
const HEADER_NAME = new RegExp(`^${TOKEN}$`);

/**
 * An Istio RequestAuthentication (security.istio.io/v1): like an AuthorizationPolicy, the
 * waypoint's when its targetRefs name this Gateway or a Service; otherwise skipped.
 */
export function readRequestAuthn(
  r: FieldReader,
  value: unknown,
  path: string,
  self: { name: string; namespace: string },
): RequestAuthn | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['name', 'namespace', 'targetRefs', 'jwtRules']);
  const name = r.string(o.name, `${path}.name`) ?? '';
  const namespace = r.string(o.namespace, `${path}.namespace`, { optional: true }) ?? self.namespace;
  const rules = r
    .array(o.jwtRules, `${path}.jwtRules`)
    .flatMap((x, i) => readJwtRule(r, x, `${path}.jwtRules[${i}]`) ?? []);
  const { targetsGateway, targetServices } = readTargets(
    r,
    o.targetRefs,
    `${path}.targetRefs`,
    namespace,
    self,
  );
  if (!targetsGateway && targetServices.length === 0) return undefined;
  return { name, namespace, rules, ...(targetsGateway ? {} : { targetServices }) };
}

function readJwtRule(r: FieldReader, value: unknown, path: string): JwtRule | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, [
    'issuer',
    'audiences',
    'jwks',
    'jwksUri',
    'fromHeaders',
    'fromParams',
    'forwardOriginalToken',
    'outputPayloadToHeader',
    'outputClaimToHeaders',
    'timeout',
  ]);
  const issuer = r.string(o.issuer, `${path}.issuer`) ?? '';
  const audiences = r.strings(o.audiences, `${path}.audiences`) ?? [];
  const jwksUri = r.string(o.jwksUri, `${path}.jwksUri`, { optional: true });
  if (jwksUri !== undefined) {
    const refusal = jwksUriRefusal(jwksUri);
    if (refusal) r.fail(`${path}.jwksUri`, refusal);
  }
  const jwks = o.jwks === undefined ? undefined : readJwks(r, o.jwks, `${path}.jwks`);
  if (o.jwks === undefined && jwksUri === undefined)
    r.fail(path, 'set jwks or jwksUri (OpenID discovery from the issuer is not supported)');
  if (o.jwks !== undefined && jwksUri !== undefined) r.fail(path, 'set one of jwks and jwksUri, not both');
  const from: JwtLocation[] = [];
  r.array(o.fromHeaders, `${path}.fromHeaders`).forEach((h, i) => {
    const hp = `${path}.fromHeaders[${i}]`;
    const q = r.object(h, hp);
    if (!q) return;
    r.onlyKeys(q, hp, ['name', 'prefix']);
    const name = r.string(q.name, `${hp}.name`, { pattern: HEADER_NAME });
    const prefix =
      q.prefix === undefined
        ? ''
        : typeof q.prefix === 'string'
          ? q.prefix
          : r.fail(`${hp}.prefix`, 'must be a string');
    if (name && prefix !== undefined) from.push({ header: name.toLowerCase(), prefix });
  });
  for (const param of r.strings(o.fromParams, `${path}.fromParams`) ?? []) from.push({ param });
  const outputClaimToHeaders = r
    .array(o.outputClaimToHeaders, `${path}.outputClaimToHeaders`)
    .flatMap((c, i) => {
      const cp = `${path}.outputClaimToHeaders[${i}]`;
      const q = r.object(c, cp);
      if (!q) return [];
      r.onlyKeys(q, cp, ['header', 'claim']);
      const header = r.string(q.header, `${cp}.header`, { pattern: HEADER_NAME });
      const claim = r.string(q.claim, `${cp}.claim`);
      return header && claim ? [{ header: header.toLowerCase(), claim }] : [];
    });
  const outputPayloadToHeader = r.string(o.outputPayloadToHeader, `${path}.outputPayloadToHeader`, {
    optional: true,
    pattern: HEADER_NAME,
  });
  return {
    issuer,
    audiences,
    ...(jwks ? { jwks } : {}),
    ...(jwksUri !== undefined ? { jwksUri } : {}),
    timeoutMs: r.duration(o.timeout, `${path}.timeout`, DEFAULT_JWKS_TIMEOUT_MS) ?? DEFAULT_JWKS_TIMEOUT_MS,
    from: from.length > 0 ? from : DEFAULT_LOCATIONS,
    forwardOriginalToken: r.bool(o.forwardOriginalToken, `${path}.forwardOriginalToken`, false),
    ...(outputPayloadToHeader ? { outputPayloadToHeader: outputPayloadToHeader.toLowerCase() } : {}),
    outputClaimToHeaders,
  };
}

/** Istio's `jwks` is the JWKS as a JSON string (a mapping is taken too); public keys only. */
function readJwks(r: FieldReader, value: unknown, path: string): JwtRule['jwks'] {
  let doc: unknown = value;
  if (typeof value === 'string') {
    try {
      doc = JSON.parse(value);
    } catch {
      return r.fail(path, 'is not JSON');
    }
  }
  const set = r.object(doc, path);
  if (!set) return undefined;
  const keys = r.array(set.keys, `${path}.keys`).flatMap((k, i) => {
    const kp = `${path}.keys[${i}]`;
    const jwk = r.object(k, kp);
    if (!jwk) return [];
    if (jwk.kty === 'oct') return r.fail(kp, 'symmetric (oct) keys are not accepted; use a public key') ?? [];
    if (['d', 'p', 'q', 'dp', 'dq', 'qi', 'k'].some((f) => jwk[f] !== undefined))
      return r.fail(kp, 'holds private key material; give the public key only') ?? [];
    try {
      createPublicKey({ key: jwk as Parameters<typeof createPublicKey>[0] & object, format: 'jwk' } as never);
    } catch (e) {
      return r.fail(kp, `is not a usable public key: ${(e as Error).message}`) ?? [];
    }
    return [jwk];
  });
  if (!Array.isArray(set.keys) || set.keys.length === 0)
    r.fail(`${path}.keys`, 'must be a non-empty list of keys');
  return { keys };
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
