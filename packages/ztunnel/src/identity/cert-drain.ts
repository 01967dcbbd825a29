import type { Credential } from '@zmesh/shared';
import { logger } from '@zmesh/shared';
import type { CertManager } from './cert-manager.js';

const log = logger('certs');

/** Whatever holds outbound connections by source identity (the HBONE pool does). */
export interface ConnectionsBySource {
  /** Drains the connections made with `identity`'s certificate; returns how many. */
  drainSource(identity: string): number;
}

/**
 * Outbound connections keep the certificate they were made with. When an identity's
 * certificate is replaced (rotation at half-life) or is about to expire, its pooled
 * connections are drained, so new tunnels use the current certificate and none is still
 * being handed new streams under a certificate past its not-after. Returns an unsubscribe.
 */
export function drainOnCertChange(certs: CertManager, pool: ConnectionsBySource): () => void {
  const drain = (reason: string) => (identity: string, cred: Credential) => {
    const n = pool.drainSource(identity);
    if (n > 0)
      log.info({ identity, reason, connections: n, notAfter: cred.notAfter.toISOString() }, 'drained');
  };
  const drainRotated = drain('rotated');
  const rotated = (identity: string, cred: Credential, previous?: Credential) => {
    if (previous) drainRotated(identity, cred);
  };
  const expiring = drain('expiring');
  certs.on('rotated', rotated);
  certs.on('expiring', expiring);
  return () => {
    certs.off('rotated', rotated);
    certs.off('expiring', expiring);
  };
}
