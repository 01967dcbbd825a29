import type * as grpc from '@grpc/grpc-js';
import { status as grpcStatus } from '@grpc/grpc-js';
import {
  type CertificateRequest,
  type CertificateResponse,
  csrUriSans,
  err,
  logger,
  ok,
  type Result,
  spiffeIdOf,
  structString,
  type Workload,
} from '@zmesh/shared';
import { authenticateNode, type NodeAuthenticator, type NodeTokens } from './node-tokens.js';

const log = logger('ca-service');

/** Signs a CSR for an identity the control plane has already authorized. */
export type SignCsr = (csrPem: string, opts: { identity: string; ttlSeconds: number }) => Promise<string[]>;

/** Workload certificates are short-lived (Istio's default is 24 h); a longer request is clamped. */
export const MAX_CERT_TTL_SECONDS = 24 * 3600;
export const DEFAULT_CERT_TTL_SECONDS = 24 * 3600;
const MIN_CERT_TTL_SECONDS = 60;
/** Metadata key a node proxy uses to ask for one of its workloads' identities (Istio's name). */
export const IMPERSONATED_IDENTITY = 'ImpersonatedIdentity';
/** The node authorizer's refusal (istiod's: a node proxy gets only identities of pods on its node). */
const NOT_ON_NODE = 'is not the identity of a workload scheduled on node';
const NOT_OWN = "is not the caller's own identity";

/** Why a certificate request was refused before signing: the label of `zmesh_cp_csr_refusals_total`. */
export type CsrRefusal = 'unauthenticated' | 'not-on-node' | 'not-own-identity' | 'invalid-request';

export interface CaServiceOptions {
  tokens: NodeTokens;
  /** Besides node tokens (Kubernetes: TokenReview); read at each request, so it can be set later. */
  authenticator?: () => NodeAuthenticator | undefined;
  /** Told of each refusal (the control plane counts them). */
  onRefused?: (reason: CsrRefusal) => void;
  signCsr: SignCsr;
  /** The workloads the control plane has scheduled on a node. */
  workloadsOnNode: (node: string) => readonly Workload[];
  maxTtlSeconds?: number;
}

/**
 * `istio.v1.auth.IstioCertificateService/CreateCertificate`. A node's proxy may obtain only
 * identities of workloads scheduled on its own node (docs/design.md §5): the requested identity
 * (ImpersonatedIdentity metadata, else the CSR's URI SAN) must be one of them, and any URI
 * SAN in the CSR must agree with it. Everything else is refused and logged.
 */
export function createCertificateHandler(opts: CaServiceOptions) {
  return (
    call: grpc.ServerUnaryCall<CertificateRequest, CertificateResponse>,
    callback: grpc.sendUnaryData<CertificateResponse>,
  ): void => {
    const header = call.metadata.get('authorization')[0];
    void (async () => {
      const auth = await authenticateNode(opts.tokens, opts.authenticator?.(), header).catch(
        (e: Error): { ok: false; reason: string } => ({
          ok: false,
          reason: `authentication failed: ${e.message}`,
        }),
      );
      if (!auth.ok) {
        log.warn(
          { peer: call.getPeer(), code: 'ZM_ERR_CA_REFUSED', reason: auth.reason },
          'certificate request without a valid node credential',
        );
        opts.onRefused?.('unauthenticated');
        callback({ code: grpcStatus.UNAUTHENTICATED, details: auth.reason });
        return;
      }
      const node = auth.node;
      const decision = await authorize(call.request, node, opts, auth.identity);
      if (!decision.ok) {
        const reason: CsrRefusal = decision.error.some((r) => r.includes(NOT_ON_NODE))
          ? 'not-on-node'
          : decision.error.some((r) => r.includes(NOT_OWN))
            ? 'not-own-identity'
            : 'invalid-request';
        log.warn(
          { node, code: 'ZM_ERR_CA_REFUSED', reason, reasons: decision.error },
          'certificate request refused',
        );
        opts.onRefused?.(reason);
        callback({ code: grpcStatus.PERMISSION_DENIED, details: decision.error.join('; ') });
        return;
      }
      try {
        const certChain = await opts.signCsr(call.request.csr ?? '', decision.value);
        log.info({ node, identity: decision.value.identity }, 'certificate issued');
        callback(null, { certChain });
      } catch (e) {
        log.error({ node, err: (e as Error).message }, 'signing failed');
        callback({ code: grpcStatus.INTERNAL, details: 'signing failed' });
      }
    })();
  };
}

/**
 * The node authorizer: `requested` must be the identity of a workload on `node`; a caller
 * authenticated as a workload (`own`: a waypoint's ServiceAccount token) gets only its own.
 */
export async function authorize(
  req: CertificateRequest,
  node: string,
  opts: Pick<CaServiceOptions, 'workloadsOnNode' | 'maxTtlSeconds'>,
  own?: string,
): Promise<Result<{ identity: string; ttlSeconds: number }>> {
  const sans = csrUriSans(req.csr ?? '');
  if (!sans.ok) return sans;
  const requested = structString(req.metadata, IMPERSONATED_IDENTITY) ?? sans.value[0];
  if (requested === undefined)
    return err(['no identity requested (neither ImpersonatedIdentity nor a URI SAN)']);
  const disagreeing = sans.value.filter((s) => s !== requested);
  if (disagreeing.length > 0) return err([`CSR URI SANs ${disagreeing.join(', ')} differ from ${requested}`]);
  if (own !== undefined && requested !== own) return err([`${requested} ${NOT_OWN} (${own})`]);
  const onNode = opts.workloadsOnNode(node);
  if (!onNode.some((w) => spiffeIdOf(w) === requested)) {
    return err([`${requested} ${NOT_ON_NODE} ${node}`]);
  }
  const max = opts.maxTtlSeconds ?? MAX_CERT_TTL_SECONDS;
  const asked = Number(req.validityDuration ?? 0);
  const ttlSeconds =
    asked > 0
      ? Math.min(Math.max(asked, MIN_CERT_TTL_SECONDS), max)
      : Math.min(DEFAULT_CERT_TTL_SECONDS, max);
  return ok({ identity: requested, ttlSeconds });
}
