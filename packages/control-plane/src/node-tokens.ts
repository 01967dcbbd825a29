import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const PREFIX = 'zmn1';
const CONTEXT = 'zmesh node bootstrap token v1:';

/**
 * Per-node bootstrap credentials (docs/design.md §5): `zmn1.<base64url node>.<base64url HMAC>`.
 * Stateless to verify; a token names exactly one node and cannot be altered to name
 * another. The key lives with the control plane; pass the same key across restarts to
 * keep issued tokens valid.
 */
export class NodeTokens {
  readonly #key: Buffer;

  constructor(key: Buffer = randomBytes(32)) {
    this.#key = key;
  }

  issueNodeToken(node: string): string {
    const name = Buffer.from(node, 'utf8').toString('base64url');
    return `${PREFIX}.${name}.${this.#mac(node).toString('base64url')}`;
  }

  /** The node the token was issued to, or undefined for anything else. */
  verify(token: string): string | undefined {
    const [prefix, name, mac, extra] = token.split('.');
    if (prefix !== PREFIX || name === undefined || mac === undefined || extra !== undefined) return undefined;
    const node = Buffer.from(name, 'base64url').toString('utf8');
    const given = Buffer.from(mac, 'base64url');
    const want = this.#mac(node);
    return given.length === want.length && timingSafeEqual(given, want) ? node : undefined;
  }

  /** Reads `authorization: Bearer <token>` and returns the node, if the token is valid. */
  nodeFromAuthorization(header: unknown): string | undefined {
    if (typeof header !== 'string' || !header.startsWith('Bearer ')) return undefined;
    return this.verify(header.slice('Bearer '.length).trim());
  }

  #mac(node: string): Buffer {
    return createHmac('sha256', this.#key)
      .update(CONTEXT + node)
      .digest();
  }
}

/**
 * Who a bearer token authenticates: a node proxy (its node), or a workload on a node acting
 * for itself alone (`identity`: a waypoint's own ServiceAccount token, which gets only that
 * identity's certificate and the waypoint configs of that ServiceAccount); or why not.
 */
export type NodeAuthentication =
  | { ok: true; node: string; identity?: string }
  | { ok: false; reason: string };

/**
 * A second way for node proxies to authenticate, beside zmesh node tokens: in Kubernetes, the
 * ztunnel's projected ServiceAccount token checked with a TokenReview (kubernetes/token-review.ts).
 */
export type NodeAuthenticator = (token: string) => Promise<NodeAuthentication>;

const INVALID = 'missing or invalid node token';

/** A node token first (no I/O), then `authenticator` if there is one. */
export async function authenticateNode(
  tokens: NodeTokens,
  authenticator: NodeAuthenticator | undefined,
  header: unknown,
): Promise<NodeAuthentication> {
  if (typeof header !== 'string' || !header.startsWith('Bearer ')) return { ok: false, reason: INVALID };
  const token = header.slice('Bearer '.length).trim();
  const node = tokens.verify(token);
  if (node !== undefined) return { ok: true, node };
  if (authenticator === undefined || token === '' || token.startsWith(`${PREFIX}.`))
    return { ok: false, reason: INVALID };
  return authenticator(token);
}
