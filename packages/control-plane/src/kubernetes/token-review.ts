import { createHash } from 'node:crypto';
import { AuthenticationV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { logger } from '@zmesh/shared';
import type { NodeAuthentication, NodeAuthenticator } from '../node-tokens.js';

const log = logger('token-review');

/** The ServiceAccount of the ztunnel DaemonSet that `zmesh install` writes, in the mesh's namespace. */
export const NODE_SERVICE_ACCOUNT = 'zmesh-node';
/** A positive review is trusted this long (the token lives an hour; the bound pod may go sooner). */
const CACHE_OK_MS = 30_000;
/** A refusal is remembered briefly, so a proxy retrying a bad token does not flood the API server. */
const CACHE_REFUSED_MS = 5_000;
const MAX_CACHED = 1024;

/** What the API server puts in a pod-bound token's user info (Kubernetes 1.32+ adds the node). */
const POD_NAME = 'authentication.kubernetes.io/pod-name';
const NODE_NAME = 'authentication.kubernetes.io/node-name';

export interface TokenReviewOptions {
  /** The audience the proxies' projected tokens are minted for (`--token-audience`). */
  audience: string;
  /** `namespace/name` of the ServiceAccounts whose pods are node proxies (the ztunnel DaemonSet's). */
  nodeAccounts: readonly string[];
  /** Any other pod-bound token authenticates its pod for itself alone (a waypoint): its SPIFFE identity's domain. */
  trustDomain: string;
  /** The node of a pod the control plane already holds, before asking the API server. */
  podNode?: (namespace: string, name: string) => string | undefined;
  now?: () => number;
}

/**
 * Node proxies' authentication in controller mode, as istiod's Kubernetes JWT authenticator
 * and node authorizer do it: the bearer token (the ztunnel's projected ServiceAccount token)
 * goes to a TokenReview for `audience`; it must be authenticated and bound to a pod, whose
 * node is the caller's node (from the review's user extra, else the pod's `spec.nodeName`).
 * A token of a node proxy ServiceAccount acts for the node: the CA signs identities of
 * workloads on it (ca-service.ts `authorize`). Any other (a waypoint's own token) acts for
 * its own identity alone: that certificate, and the waypoint config of that ServiceAccount. Reviews are cached by the token's
 * hash (30 s; a refusal 5 s); a review that fails (API server unreachable) is not.
 */
export function tokenReviewAuthenticator(kc: KubeConfig, opts: TokenReviewOptions): NodeAuthenticator {
  const authn = kc.makeApiClient(AuthenticationV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const now = opts.now ?? Date.now;
  const cache = new Map<string, { until: number; result: NodeAuthentication }>();
  const remember = (key: string, result: NodeAuthentication): NodeAuthentication => {
    if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value as string);
    cache.set(key, { until: now() + (result.ok ? CACHE_OK_MS : CACHE_REFUSED_MS), result });
    if (!result.ok) log.warn({ reason: result.reason }, 'node proxy token refused');
    return result;
  };
  const refused = (reason: string): NodeAuthentication => ({ ok: false, reason: `token review: ${reason}` });

  return async (token) => {
    const key = createHash('sha256').update(token).digest('hex');
    const hit = cache.get(key);
    if (hit !== undefined && hit.until > now()) return hit.result;
    cache.delete(key);
    let review: Awaited<ReturnType<AuthenticationV1Api['createTokenReview']>>;
    try {
      review = await authn.createTokenReview({
        body: {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenReview',
          spec: { token, audiences: [opts.audience] },
        },
      });
    } catch (e) {
      return refused(`the API server did not answer: ${(e as Error).message}`);
    }
    const status = review.status ?? {};
    if (status.authenticated !== true) return remember(key, refused(status.error || 'not authenticated'));
    if (status.audiences !== undefined && !status.audiences.includes(opts.audience))
      return remember(key, refused(`not for audience ${opts.audience}`));
    const account = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(status.user?.username ?? '');
    const who = account ? `${account[1]}/${account[2]}` : (status.user?.username ?? '(nobody)');
    const extra = status.user?.extra ?? {};
    if (!account) return remember(key, refused(`${who} is not a ServiceAccount`));
    // Not a node proxy: a workload (a waypoint) for itself alone, on the node of the pod its token is bound to.
    const own = opts.nodeAccounts.includes(who)
      ? undefined
      : `spiffe://${opts.trustDomain}/ns/${account[1]}/sa/${account[2]}`;
    if (own !== undefined && !extra[POD_NAME]?.[0])
      return remember(
        key,
        refused(
          `${who} is not a node proxy ServiceAccount (${opts.nodeAccounts.join(', ')}) nor bound to a pod`,
        ),
      );
    let node = extra[NODE_NAME]?.[0];
    const pod = extra[POD_NAME]?.[0];
    if (!node && pod) {
      const namespace = account[1] as string;
      node = opts.podNode?.(namespace, pod);
      if (!node) {
        try {
          node = (await core.readNamespacedPod({ namespace, name: pod })).spec?.nodeName;
        } catch (e) {
          return refused(`pod ${namespace}/${pod} could not be read: ${(e as Error).message}`);
        }
      }
    }
    if (!node) return remember(key, refused(`${who}: the token is not bound to a pod scheduled on a node`));
    return remember(key, own === undefined ? { ok: true, node } : { ok: true, node, identity: own });
  };
}
