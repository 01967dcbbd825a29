import { createPublicKey } from 'node:crypto';
import type { FieldReader } from '../config/field-reader.js';
import { type Cidr, cidrContains, parseCidr, parseIp } from '../net/ip.js';

/**
 * The waypoint's L7 authorization and authentication model (Istio AuthorizationPolicy
 * with targetRefs, RequestAuthentication) and its one reader. The waypoint decodes its
 * config with it, and the control plane's admission runs the same reader on what is
 * applied (convertAuthorizationPolicy, convertRequestAuthentication), so what apply admits
 * is what the waypoint serves.
 */

export interface PolicySource {
  principals?: string[];
  notPrincipals?: string[];
  namespaces?: string[];
  notNamespaces?: string[];
  /** `iss/sub` of the request's verified JWT, with Istio's `*` forms. */
  requestPrincipals?: string[];
  notRequestPrincipals?: string[];
  /** The source workload's address (from the tunnel's `Forwarded`). */
  ipBlocks?: Cidr[];
  notIpBlocks?: Cidr[];
  /** The original client's address; equal to the source's (no trusted proxy hops are configured). */
  remoteIpBlocks?: Cidr[];
  notRemoteIpBlocks?: Cidr[];
}

export interface PolicyOperation {
  methods?: string[];
  notMethods?: string[];
  /** Istio forms only: exact, `/x*` prefix, `*x` suffix, `*`; matched on the normalized path. */
  paths?: string[];
  notPaths?: string[];
  hosts?: string[];
  notHosts?: string[];
  ports?: number[];
  notPorts?: number[];
}

/** What a `when` condition's key reads. */
export type ConditionAttr =
  | { kind: 'header'; name: string }
  /** `request.auth.claims[a][b]`: the path into the JWT payload. */
  | { kind: 'claim'; path: string[] }
  | {
      kind:
        | 'requestPrincipal'
        | 'audiences'
        | 'presenter'
        | 'sourcePrincipal'
        | 'sourceNamespace'
        | 'destinationPort';
    }
  | { kind: 'sourceIp' | 'remoteIp' | 'destinationIp' };

/**
 * One `when` entry. `key` is as written; string attributes compare `values` with Istio's
 * `*` forms, IP attributes compare the parsed `cidrs`, ports compare exactly.
 */
export interface PolicyCondition {
  key: string;
  attr: ConditionAttr;
  values?: string[];
  notValues?: string[];
  cidrs?: Cidr[];
  notCidrs?: Cidr[];
}

export interface PolicyRule {
  from: PolicySource[];
  to: PolicyOperation[];
  when: PolicyCondition[];
}

/** AUDIT never allows or denies: a matching request is marked in the access log. */
export type L7Action = 'ALLOW' | 'DENY' | 'AUDIT';

export interface L7Policy {
  name: string;
  namespace: string;
  action: L7Action;
  rules: PolicyRule[];
  /** targetRefs of kind Service (`namespace/name`): the policy applies to these only. */
  targetServices?: string[];
}

/** Where a JWT is read from: a header (with its scheme prefix), or a query parameter. */
export type JwtLocation = { header: string; prefix: string } | { param: string };

/** One `jwtRules` entry of an Istio RequestAuthentication. */
export interface JwtRule {
  issuer: string;
  /** Empty: no audience check (Istio's default). */
  audiences: string[];
  /** Inline JWKS (public keys only). */
  jwks?: { keys: Record<string, unknown>[] };
  /** Fetched, cached and refreshed; only loopback or a mesh service name. */
  jwksUri?: string;
  /** Fetch timeout for jwksUri (Istio's `timeout`, default 5 s). */
  timeoutMs: number;
  /** In the order tried; default `Authorization: Bearer` then `?access_token=`. */
  from: JwtLocation[];
  forwardOriginalToken: boolean;
  outputPayloadToHeader?: string;
  outputClaimToHeaders: Array<{ header: string; claim: string }>;
}

export interface RequestAuthn {
  name: string;
  namespace: string;
  rules: JwtRule[];
  /** targetRefs of kind Service (`namespace/name`): applies to these only. */
  targetServices?: string[];
}

const LOOPBACK = [parseCidr('127.0.0.0/8'), parseCidr('::1/128')].filter((c) => typeof c !== 'string');
/** A Kubernetes service name: `<name>.<namespace>.svc[.<cluster domain>]`. */
const SERVICE_HOST = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.svc(\.[a-z0-9.-]+)?$/;

/**
 * Why a jwksUri may not be fetched, or undefined when it may: the waypoint fetches keys
 * only from inside the mesh (a service name) or its own host (loopback), never from the
 * internet, so a policy author cannot make it call out or probe arbitrary addresses.
 */
export function jwksUriRefusal(uri: string): string | undefined {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return 'is not a URL';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'must be http:// or https://';
  if (url.username !== '' || url.password !== '') return 'must not carry credentials';
  return jwksHostKind(url.hostname) === undefined
    ? `host ${url.hostname} is outside the mesh: use a loopback address or a service name <name>.<namespace>.svc[.<domain>] (zmesh does not fetch keys from outside)`
    : undefined;
}

export function jwksHostKind(hostname: string): 'loopback' | 'service' | undefined {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  if (bare === 'localhost') return 'loopback';
  const ip = parseIp(bare);
  if (ip) return LOOPBACK.some((c) => cidrContains(c, ip)) ? 'loopback' : undefined;
  return SERVICE_HOST.test(bare.toLowerCase()) ? 'service' : undefined;
}

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

export function readRule(r: FieldReader, value: unknown, path: string): PolicyRule | undefined {
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
    // A path template ({*}, {**}) is refused by readOperation with its own reason.
    if (s.includes('{')) return;
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

export function readJwtRule(r: FieldReader, value: unknown, path: string): JwtRule | undefined {
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
