import { randomBytes } from 'node:crypto';
import type { KubeObject } from './resources.js';
import { ApiError } from './wire.js';

/**
 * The API server double's ServiceAccount tokens: the TokenRequest subresource a kubelet calls
 * for a pod's projected token, and `tokenreviews`, which authenticates only tokens issued
 * here, with their audiences, expiry and bound pod (gone or replaced: invalid), and puts the
 * pod and node in the user's extra as Kubernetes 1.32+ does.
 */

/** What a kubelet asks for a pod's projected token (`TokenRequest.spec`). */
export interface TokenRequestSpec {
  audiences?: string[];
  expirationSeconds?: number;
  boundObjectRef?: { kind?: string; apiVersion?: string; name?: string; uid?: string };
}

/** What was recorded about a token issued here (a review reads it). */
interface IssuedToken {
  namespace: string;
  serviceAccount: string;
  serviceAccountUid: string;
  audiences: string[];
  expiresAt: number;
  pod?: { name: string; uid: string; node?: string };
}

/** A core (`v1`) object from the double's store, or undefined. */
export type CoreLookup = (
  resource: 'pods' | 'serviceaccounts',
  namespace: string,
  name: string,
) => KubeObject | undefined;

/** The API server's own audience: a TokenReview without audiences checks against it. */
const API_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';

export class ServiceAccountTokens {
  readonly #issued = new Map<string, IssuedToken>();

  constructor(private readonly lookup: CoreLookup) {}

  /**
   * A token for `namespace/serviceAccount`, bound to a pod when `boundObjectRef` names one (it
   * must exist, with that uid if given). Throws the API's error otherwise.
   */
  request(
    namespace: string,
    serviceAccount: string,
    spec: TokenRequestSpec = {},
  ): { token: string; expirationTimestamp: string } {
    const sa = this.lookup('serviceaccounts', namespace, serviceAccount);
    if (sa === undefined)
      throw new ApiError(404, 'NotFound', `serviceaccounts "${serviceAccount}" not found`);
    const seconds = spec.expirationSeconds ?? 3600;
    if (!Number.isInteger(seconds) || seconds < 600)
      throw new ApiError(
        422,
        'Invalid',
        'spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes',
      );
    const issued: IssuedToken = {
      namespace,
      serviceAccount,
      serviceAccountUid: String(sa.metadata.uid),
      audiences: spec.audiences?.length ? [...spec.audiences] : [API_AUDIENCE],
      expiresAt: Date.now() + seconds * 1000,
    };
    const ref = spec.boundObjectRef;
    if (ref !== undefined) {
      if (ref.kind !== 'Pod' || !ref.name)
        throw new ApiError(422, 'Invalid', 'spec.boundObjectRef: only a Pod, by name, is supported here');
      const pod = this.lookup('pods', namespace, ref.name);
      if (pod === undefined || (ref.uid !== undefined && ref.uid !== pod.metadata.uid))
        throw new ApiError(404, 'NotFound', `pods "${ref.name}" not found`);
      const node = (pod.spec as { nodeName?: string } | undefined)?.nodeName;
      issued.pod = { name: ref.name, uid: String(pod.metadata.uid), ...(node ? { node } : {}) };
    }
    const token = `double.${randomBytes(24).toString('base64url')}`;
    this.#issued.set(token, issued);
    return { token, expirationTimestamp: new Date(issued.expiresAt).toISOString() };
  }

  /** `TokenReview.status` for `token` against `audiences` (the API's own when none). */
  review(token: string, audiences: readonly string[] = []): Record<string, unknown> {
    const issued = this.#issued.get(token);
    const invalid = (why: string) => ({
      authenticated: false,
      user: {},
      error: `[invalid bearer token, ${why}]`,
    });
    if (issued === undefined) return invalid('token is not one this server issued');
    if (Date.now() >= issued.expiresAt) return invalid('Token has expired.');
    const wanted = audiences.length > 0 ? audiences : [API_AUDIENCE];
    const matched = wanted.filter((a) => issued.audiences.includes(a));
    if (matched.length === 0)
      return invalid(
        `token audiences ${JSON.stringify(issued.audiences)} is invalid for the target audiences ${JSON.stringify(wanted)}`,
      );
    const sa = this.lookup('serviceaccounts', issued.namespace, issued.serviceAccount);
    if (sa === undefined || String(sa.metadata.uid) !== issued.serviceAccountUid)
      return invalid(`service account ${issued.namespace}/${issued.serviceAccount} has been deleted`);
    const extra: Record<string, string[]> = {};
    if (issued.pod !== undefined) {
      const pod = this.lookup('pods', issued.namespace, issued.pod.name);
      if (pod === undefined || String(pod.metadata.uid) !== issued.pod.uid)
        return invalid(`pod ${issued.namespace}/${issued.pod.name} the token is bound to is gone`);
      extra['authentication.kubernetes.io/pod-name'] = [issued.pod.name];
      extra['authentication.kubernetes.io/pod-uid'] = [issued.pod.uid];
      if (issued.pod.node !== undefined) extra['authentication.kubernetes.io/node-name'] = [issued.pod.node];
    }
    return {
      authenticated: true,
      user: {
        username: `system:serviceaccount:${issued.namespace}:${issued.serviceAccount}`,
        uid: issued.serviceAccountUid,
        groups: [
          'system:serviceaccounts',
          `system:serviceaccounts:${issued.namespace}`,
          'system:authenticated',
        ],
        extra,
      },
      audiences: matched,
    };
  }

  /**
   * Serves TokenRequest (`api/v1/namespaces/NS/serviceaccounts/NAME/token`) and TokenReview
   * (`apis/authentication.k8s.io/v1/tokenreviews`); undefined for any other path.
   */
  route(method: string, parts: string[], body: unknown): { status: number; body: unknown } | undefined {
    const tokenRequest =
      parts.length === 7 &&
      parts[0] === 'api' &&
      parts[1] === 'v1' &&
      parts[2] === 'namespaces' &&
      parts[4] === 'serviceaccounts' &&
      parts[6] === 'token';
    const tokenReview = parts.join('/') === 'apis/authentication.k8s.io/v1/tokenreviews';
    if (!tokenRequest && !tokenReview) return undefined;
    if (method !== 'POST') throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported`);
    const spec = ((body ?? {}) as { spec?: Record<string, unknown> }).spec ?? {};
    if (tokenRequest) {
      const status = this.request(parts[3] as string, parts[5] as string, spec as TokenRequestSpec);
      return {
        status: 201,
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', metadata: {}, spec, status },
      };
    }
    if (typeof spec.token !== 'string' || spec.token === '')
      throw new ApiError(422, 'Invalid', 'spec.token: Required value');
    const audiences = Array.isArray(spec.audiences) ? spec.audiences.map(String) : [];
    return {
      status: 201,
      body: {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        metadata: {},
        spec,
        status: this.review(spec.token, audiences),
      },
    };
  }
}
