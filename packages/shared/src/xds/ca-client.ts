import { X509Certificate } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { ZmeshError } from '../errors/zmesh-error.js';
import { validateSvid } from '../identity/svid.js';
import type { TrustBundle } from '../identity/trust-bundle.js';
import { logger } from '../log/logger.js';
import { err, ok, type Result } from '../result.js';
import {
  CA_METHOD,
  type CertificateRequest,
  type CertificateResponse,
  certificateRequestCodec,
  certificateResponseCodec,
  toStruct,
} from './ads-messages.js';
import { csrPublicKey } from './csr-info.js';
import { splitAddresses } from './token-file.js';
import { ControlPlaneChannels, tlsFailure } from './transport.js';

/** Signs a CSR for an identity; ztunnel's CertManager and the waypoint take any of these. */
export interface CertificateSigner {
  sign(csrPem: string, identity: string, ttlSeconds: number): Promise<string[]>;
}

const log = logger('ca-client');

/** Per request: a CA that has not answered by then is treated as down (CertManager backs off). */
export const DEFAULT_CA_TIMEOUT_MS = 10_000;
/** A chain longer than this is not something our CA (or Istio's) ever returns. */
export const MAX_CHAIN_LENGTH = 8;
/** Metadata key of Istio's CA API for a node proxy asking on behalf of a workload. */
const IMPERSONATED_IDENTITY = 'ImpersonatedIdentity';

export interface CaClientOptions {
  /**
   * `host:port` (or `unix:<path>`) of `istio.v1.auth.IstioCertificateService`; several,
   * comma-separated, are tried in turn when one is unreachable.
   */
  address: string;
  /** The node bootstrap token, re-read on every request (a projected token rotates). */
  token: () => string;
  /**
   * Called when the CA refuses the token (UNAUTHENTICATED); the request is retried once
   * when it resolves true (the token file held a new token).
   */
  refreshToken?: () => Promise<boolean>;
  bundle: TrustBundle;
  /**
   * Forces these credentials for every address (tests). Without them each address follows
   * the transport rule (transport.ts): plaintext on loopback, else TLS verified against the
   * roots `bundle` holds at that handshake: a root rotated in through the roots file is
   * trusted from the next request on, as by the xDS client (ControlPlaneChannels).
   */
  credentials?: grpc.ChannelCredentials;
  timeoutMs?: number;
  /**
   * Accept a chain whose last element is a self-signed root not yet in the bundle, and add
   * that root to it. Only safe when the channel to the CA is itself authenticated; otherwise
   * new roots arrive through the watched roots file and a chain must anchor in the bundle.
   */
  trustRootsFromCa?: boolean;
  /**
   * The channel's reconnect backoff. grpc-js defaults reach 120 s, which would keep a
   * recovered CA unreachable long after certificate retries resume; keep it at the
   * CertManager's retry bounds.
   */
  backoff?: { initialMs: number; maxMs: number };
}

/**
 * `CertificateSigner` over the CA API (docs/design.md §4, §5). The node token goes as
 * `authorization: Bearer`, the workload's identity as `ImpersonatedIdentity` in the request
 * metadata. A returned chain is accepted only if it is a valid X.509-SVID for exactly the
 * identity asked for, certifies the key of our CSR, and leads to a trusted root.
 */
export class CaClient implements CertificateSigner {
  readonly #opts: CaClientOptions;
  /** One channel per CA address (rebuilt when the bundle's roots move); `#at` is the one that answered last. */
  readonly #channels: ControlPlaneChannels;
  #at = 0;

  constructor(opts: CaClientOptions) {
    this.#opts = opts;
    const backoff = opts.backoff ?? { initialMs: 500, maxMs: 30_000 };
    this.#channels = new ControlPlaneChannels(splitAddresses(opts.address), {
      roots: opts.bundle,
      ...(opts.credentials ? { credentials: opts.credentials } : {}),
      options: {
        'grpc.initial_reconnect_backoff_ms': backoff.initialMs,
        'grpc.max_reconnect_backoff_ms': backoff.maxMs,
      },
    });
  }

  async sign(csrPem: string, identity: string, ttlSeconds: number): Promise<string[]> {
    const chain = await this.#call(identity, {
      csr: csrPem,
      validityDuration: ttlSeconds,
      metadata: toStruct({ [IMPERSONATED_IDENTITY]: identity }),
    });
    const checked = this.verifyChain(chain, identity, csrPem);
    if (!checked.ok) {
      log.warn({ identity, reasons: checked.error }, 'CA answer rejected');
      throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: `from CA: ${checked.error.join('; ')}` });
    }
    return chain;
  }

  /** Checks a CA answer; offers a new self-signed root to the bundle when allowed. */
  verifyChain(chain: readonly string[], identity: string, csrPem: string): Result<string[]> {
    if (chain.length === 0 || chain.length > MAX_CHAIN_LENGTH) {
      return err([`chain has ${chain.length} certificates (1..${MAX_CHAIN_LENGTH})`]);
    }
    const candidate = this.#newRoot(chain);
    const roots = [...this.#opts.bundle.roots(), ...(candidate ? [candidate] : [])];
    const svid = validateSvid([...chain], { roots });
    if (!svid.ok) return svid;
    const reasons: string[] = [];
    if (svid.value.identity !== identity)
      reasons.push(`leaf is for ${svid.value.identity}, asked ${identity}`);
    if (!sameKey(chain[0]!, csrPem)) reasons.push('leaf does not certify the key of the CSR');
    if (reasons.length > 0) return err(reasons);
    if (candidate) {
      log.warn({ identity }, 'trusting a new root from the CA chain');
      this.#opts.bundle.add(candidate);
    }
    return ok([...chain]);
  }

  close(): void {
    this.#channels.close();
  }

  /** The chain's last element when it is a self-signed CA outside the bundle and may be trusted. */
  #newRoot(chain: readonly string[]): string | undefined {
    if (!this.#opts.trustRootsFromCa) return undefined;
    try {
      const last = new X509Certificate(chain.at(-1)!);
      const known = this.#opts.bundle.roots().some((r) => new X509Certificate(r).raw.equals(last.raw));
      return !known && last.ca && last.checkIssued(last) && last.verify(last.publicKey)
        ? last.toString()
        : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Asks the CA in use; an unreachable one (UNAVAILABLE, deadline) passes the request to
   * the next address, once round; a refused token is re-read and the request retried once.
   */
  async #call(identity: string, request: CertificateRequest): Promise<string[]> {
    let refreshed = false;
    for (let tried = 0; ; ) {
      try {
        return await this.#callOne(
          this.#channels.get(this.#at),
          this.#channels.addresses[this.#at]!,
          identity,
          request,
        );
      } catch (e) {
        const code = ((e as ZmeshError).cause as grpc.ServiceError | undefined)?.code;
        if (code === grpc.status.UNAUTHENTICATED && !refreshed && this.#opts.refreshToken) {
          refreshed = true;
          if (await this.#opts.refreshToken().catch(() => false)) continue;
        }
        const unreachable = code === grpc.status.UNAVAILABLE || code === grpc.status.DEADLINE_EXCEEDED;
        const count = this.#channels.addresses.length;
        if (!unreachable || ++tried >= count) throw e;
        this.#at = (this.#at + 1) % count;
      }
    }
  }

  #callOne(
    client: grpc.Client,
    address: string,
    identity: string,
    request: CertificateRequest,
  ): Promise<string[]> {
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${this.#opts.token()}`);
    const deadline = Date.now() + (this.#opts.timeoutMs ?? DEFAULT_CA_TIMEOUT_MS);
    return new Promise((resolve, reject) => {
      client.makeUnaryRequest(
        CA_METHOD,
        certificateRequestCodec.serialize,
        certificateResponseCodec.deserialize,
        request,
        metadata,
        { deadline },
        (e: grpc.ServiceError | null, res?: CertificateResponse) => {
          if (e) return reject(callError(identity, address, e));
          resolve(res?.certChain ?? []);
        },
      );
    });
  }
}

function callError(identity: string, address: string, e: grpc.ServiceError): ZmeshError {
  const refused = tlsFailure(address, e);
  if (refused !== undefined) {
    const tls = new ZmeshError('ZM_ERR_XDS_TLS_REFUSED', { address, reason: refused }, { cause: e });
    log.warn({ code: tls.code, address, identity }, tls.message);
    return tls;
  }
  const refusals = [grpc.status.PERMISSION_DENIED, grpc.status.UNAUTHENTICATED, grpc.status.INVALID_ARGUMENT];
  const code = refusals.includes(e.code) ? 'ZM_ERR_CA_REFUSED' : 'ZM_ERR_CA_UNAVAILABLE';
  return new ZmeshError(code, { identity, reason: `${grpc.status[e.code]}: ${e.details}` }, { cause: e });
}

/** The leaf's public key equals the CSR's: otherwise our private key could not use it. */
function sameKey(leafPem: string, csrPem: string): boolean {
  try {
    const csrKey = csrPublicKey(csrPem);
    if (!csrKey.ok) return false;
    const leafKey = new X509Certificate(leafPem).publicKey.export({ type: 'spki', format: 'der' });
    return leafKey.equals(csrKey.value);
  } catch {
    return false;
  }
}
