import type { CertificateAuthority } from '@zmesh/shared';
import type { CertificateSigner } from './cert-manager.js';

/**
 * Signs with a CA held in this process: explicit-proxy mode without a control plane
 * (development, tests, `make demo`'s first stage). In a mesh the signer is the CA client,
 * and no node ever holds the CA key.
 */
export class LocalCaSigner implements CertificateSigner {
  constructor(private readonly ca: CertificateAuthority) {}

  sign(csrPem: string, identity: string, ttlSeconds: number): Promise<string[]> {
    return this.ca.signCsr(csrPem, { identity, ttlSeconds });
  }
}
