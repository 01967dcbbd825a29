import {
  createLocalJWKSet,
  createRemoteJWKSet,
  customFetch,
  decodeJwt,
  errors,
  type JWTPayload,
  type JWTVerifyGetKey,
  jwtVerify,
} from 'jose';
import type { JwtLocation, JwtRule, RequestAuthn } from '../config/waypoint-config.js';
import { JWKS_MAX_BYTES, meshFetch } from './jwks-fetch.js';

/**
 * Asymmetric signatures only. Pinning the list refuses `alg: none` and the HMAC-with-a-
 * public-key confusion before any key is chosen (jose checks `algorithms` first, and it
 * picks a key only of the type the algorithm needs).
 */
const JWT_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
];

/** Envoy's default clock skew for exp and nbf (jwt_authn `clock_skew_seconds`). */
const CLOCK_SKEW_S = 60;

/** A verified token's facts, for `requestPrincipals` and `request.auth.*` conditions. */
export interface RequestAuth {
  /** `iss/sub`, Istio's request principal. */
  principal: string;
  claims: JWTPayload;
  audiences: string[];
  presenter: string;
}

/** What to change on the request that goes upstream. */
interface HeaderEdits {
  remove: string[];
  removeParams: string[];
  set: Record<string, string>;
}

export type AuthnOutcome =
  | { kind: 'none' }
  | { kind: 'valid'; auth: RequestAuth; edits: HeaderEdits }
  | { kind: 'invalid'; reason: string };

export interface RequestFacts {
  header(name: string): string | undefined;
  /** The query string without `?` ('' if none). */
  query: string;
}

export interface JwksOptions {
  /** Keys fetched from a jwksUri are used this long before a refetch (default 20 min, Istio's refresh). */
  cacheMaxAgeMs?: number;
  /** A token with an unknown `kid` refetches at most this often (default 30 s). */
  cooldownMs?: number;
  maxBytes?: number;
}

const DEFAULT_JWKS_CACHE_MS = 20 * 60_000;
const DEFAULT_JWKS_COOLDOWN_MS = 30_000;

/**
 * Istio's RequestAuthentication (Envoy's jwt_authn as Istio programs it, `requires_any` with
 * `allow_missing`): every applicable jwtRule is tried; a request with no token at any of
 * their locations passes unauthenticated; a token that is present must verify against the
 * rule of its issuer (signature, exp/nbf, audiences), or the request is refused. Keys from a
 * jwksUri are cached across config swaps, refreshed after `cacheMaxAgeMs`, and refetched
 * early when a token names a key id not yet seen (a rotation).
 */
export class JwtAuthenticator {
  readonly #opts: JwksOptions;
  readonly #resolve: (host: string) => string | undefined;
  readonly #remote = new Map<string, JWTVerifyGetKey>();
  readonly #local = new WeakMap<JwtRule, JWTVerifyGetKey>();

  constructor(resolve: (host: string) => string | undefined, opts: JwksOptions = {}) {
    this.#resolve = resolve;
    this.#opts = opts;
  }

  /** Drops cached key sets of URIs no longer in the config. */
  retain(authns: readonly RequestAuthn[]): void {
    const keep = new Set(authns.flatMap((a) => a.rules.map(remoteKey)));
    for (const k of this.#remote.keys()) if (!keep.has(k)) this.#remote.delete(k);
  }

  async authenticate(rules: readonly JwtRule[], req: RequestFacts): Promise<AuthnOutcome> {
    if (rules.length === 0) return { kind: 'none' };
    const found = extractTokens(rules, req);
    if (found.length === 0) return { kind: 'none' };
    const edits: HeaderEdits = { remove: [], removeParams: [], set: {} };
    let first: RequestAuth | undefined;
    // Every token present must verify: one forged token next to a good one is still refused.
    for (const { token, location } of found) {
      const verified = await this.#verify(token, location, rules);
      if ('reason' in verified) return { kind: 'invalid', reason: verified.reason };
      first ??= verified.auth;
      const { rule } = verified;
      if (!rule.forwardOriginalToken) {
        if ('header' in location) edits.remove.push(location.header);
        else edits.removeParams.push(location.param);
      }
      if (rule.outputPayloadToHeader) edits.set[rule.outputPayloadToHeader] = token.split('.')[1] ?? '';
      for (const { header, claim } of rule.outputClaimToHeaders) {
        const v = verified.auth.claims[claim];
        if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean')
          edits.set[header] = String(v);
      }
    }
    return { kind: 'valid', auth: first!, edits };
  }

  async #verify(
    token: string,
    location: JwtLocation,
    rules: readonly JwtRule[],
  ): Promise<{ auth: RequestAuth; rule: JwtRule } | { reason: string }> {
    let iss: unknown;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      return { reason: 'Jwt is not in the form of Header.Payload.Signature' };
    }
    const candidates = rules.filter((r) => r.issuer === iss && r.from.some((l) => sameLocation(l, location)));
    if (candidates.length === 0) return { reason: 'Jwt issuer is not configured' };
    let reason = '';
    for (const rule of candidates) {
      try {
        const { payload } = await jwtVerify(token, this.#keys(rule), {
          issuer: rule.issuer,
          ...(rule.audiences.length > 0 ? { audience: rule.audiences } : {}),
          algorithms: JWT_ALGORITHMS,
          clockTolerance: CLOCK_SKEW_S,
        });
        const aud = payload.aud === undefined ? [] : Array.isArray(payload.aud) ? payload.aud : [payload.aud];
        const auth: RequestAuth = {
          principal: `${payload.iss}/${payload.sub ?? ''}`,
          claims: payload,
          audiences: aud,
          presenter: typeof payload.azp === 'string' ? payload.azp : '',
        };
        return { auth, rule };
      } catch (e) {
        reason = describe(e);
      }
    }
    return { reason };
  }

  #keys(rule: JwtRule): JWTVerifyGetKey {
    if (rule.jwks) {
      let set = this.#local.get(rule);
      if (!set) {
        set = createLocalJWKSet(rule.jwks as Parameters<typeof createLocalJWKSet>[0]);
        this.#local.set(rule, set);
      }
      return set;
    }
    const key = remoteKey(rule);
    let set = this.#remote.get(key);
    if (!set) {
      set = createRemoteJWKSet(new URL(rule.jwksUri!), {
        timeoutDuration: rule.timeoutMs,
        cacheMaxAge: this.#opts.cacheMaxAgeMs ?? DEFAULT_JWKS_CACHE_MS,
        cooldownDuration: this.#opts.cooldownMs ?? DEFAULT_JWKS_COOLDOWN_MS,
        [customFetch]: meshFetch(this.#resolve, this.#opts.maxBytes ?? JWKS_MAX_BYTES),
      });
      this.#remote.set(key, set);
    }
    return set;
  }
}

function remoteKey(rule: JwtRule): string {
  return `${rule.jwksUri ?? ''}|${rule.timeoutMs}`;
}

/** Envoy's messages where one fits (they reach the client in the 401 body). */
function describe(e: unknown): string {
  if (e instanceof errors.JWTExpired) return 'Jwt is expired';
  if (e instanceof errors.JWTClaimValidationFailed) {
    if (e.claim === 'nbf') return 'Jwt not yet valid';
    if (e.claim === 'aud') return 'Audiences in Jwt are not allowed';
    if (e.claim === 'iss') return 'Jwt issuer is not configured';
    return `Jwt claim ${e.claim} is invalid`;
  }
  if (e instanceof errors.JOSEAlgNotAllowed || e instanceof errors.JOSENotSupported)
    return 'Jwt algorithm is not allowed';
  if (e instanceof errors.JWSSignatureVerificationFailed) return 'Jwt verification fails';
  if (e instanceof errors.JWKSNoMatchingKey || e instanceof errors.JWKSMultipleMatchingKeys)
    return 'Jwks doesn\u2019t have key to match kid or alg from Jwt';
  if (e instanceof errors.JWKSTimeout) return 'Jwks remote fetch timed out';
  if (e instanceof errors.JWTInvalid || e instanceof errors.JWSInvalid) return 'Jwt is malformed';
  return `Jwks remote fetch failed: ${(e as Error).message}`.slice(0, 200);
}

function sameLocation(a: JwtLocation, b: JwtLocation): boolean {
  return 'header' in a
    ? 'header' in b && a.header === b.header && a.prefix === b.prefix
    : 'param' in b && a.param === b.param;
}

/** Each distinct location of the rules, in order, with the token found there. */
function extractTokens(
  rules: readonly JwtRule[],
  req: RequestFacts,
): Array<{ token: string; location: JwtLocation }> {
  const out: Array<{ token: string; location: JwtLocation }> = [];
  const seen = new Set<string>();
  let params: URLSearchParams | undefined;
  for (const rule of rules) {
    for (const location of rule.from) {
      const id = 'header' in location ? `h:${location.header}:${location.prefix}` : `p:${location.param}`;
      if (seen.has(id)) continue;
      seen.add(id);
      let token: string | undefined;
      if ('header' in location) {
        const v = req.header(location.header);
        // The scheme is case-insensitive (RFC 9110 §11.1), as Envoy compares it.
        if (
          v !== undefined &&
          v.slice(0, location.prefix.length).toLowerCase() === location.prefix.toLowerCase()
        )
          token = v.slice(location.prefix.length).trim();
      } else if (req.query !== '') {
        params ??= new URLSearchParams(req.query);
        token = params.get(location.param) ?? undefined;
      }
      if (token) out.push({ token, location });
    }
  }
  return out;
}
