import * as grpc from '@grpc/grpc-js';
import { type CertificateAuthority, logger } from '@zmesh/shared';

const log = logger('serving-cert');

/** A day, as istiod's DNS certificate; renewed at two thirds of its life. */
const DEFAULT_SERVING_TTL_SECONDS = 24 * 3600;
const RENEW_AT = 2 / 3;
/** After a failed renewal (the old certificate is still valid), try again this soon. */
const RETRY_MS = 30_000;

export interface ServingTlsOptions {
  /** The Service DNS names proxies dial (`--serving-dns`). */
  dnsNames: readonly string[];
  /** The listen IP, certified too so a proxy may dial the pod address. */
  ips: readonly string[];
  ttlSeconds?: number;
}

/**
 * grpc-js server credentials holding a serving certificate from the control plane's own CA
 * (istiod's "DNS certificate"), renewed before it expires: grpc-js gives each new secure
 * context to the bound server (its credentials watcher), so open streams keep theirs and new
 * handshakes get the new one.
 */
export class ServingCredentials extends grpc.ServerCredentials {
  readonly #ca: Pick<CertificateAuthority, 'issueServing'>;
  readonly #opts: ServingTlsOptions;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** When the certificate served now expires. */
  notAfter = new Date(0);
  /** Certificates issued so far (1 after start). */
  issued = 0;

  private constructor(ca: Pick<CertificateAuthority, 'issueServing'>, opts: ServingTlsOptions) {
    super({ requestCert: false }, undefined);
    this.#ca = ca;
    this.#opts = opts;
  }

  /** Issues the first certificate (a refused name throws ZM_ERR_CONFIG_INVALID) and schedules renewals. */
  static async start(
    ca: Pick<CertificateAuthority, 'issueServing'>,
    opts: ServingTlsOptions,
  ): Promise<ServingCredentials> {
    const creds = new ServingCredentials(ca, opts);
    await creds.renew();
    return creds;
  }

  /** Issues a new certificate now and hands it to the server. */
  async renew(): Promise<void> {
    const ttlSeconds = this.#opts.ttlSeconds ?? DEFAULT_SERVING_TTL_SECONDS;
    const issued = await this.#ca.issueServing({
      dnsNames: this.#opts.dnsNames,
      ips: this.#opts.ips,
      ttlSeconds,
    });
    if (this.#closed) return;
    this.notAfter = issued.notAfter;
    this.issued++;
    this.updateSecureContextOptions({ key: issued.keyPem, cert: issued.certChainPem.join('') });
    log.info(
      { dns: this.#opts.dnsNames, ips: this.#opts.ips, notAfter: issued.notAfter.toISOString() },
      'serving certificate issued',
    );
    this.#schedule(Math.max(1000, (issued.notAfter.getTime() - Date.now()) * RENEW_AT));
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  _equals(other: grpc.ServerCredentials): boolean {
    return other === this;
  }

  #schedule(ms: number): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.renew().catch((e: Error) => {
        log.error({ err: e.message }, 'serving certificate renewal failed; retrying');
        this.#schedule(RETRY_MS);
      });
    }, ms);
    this.#timer.unref();
  }
}
