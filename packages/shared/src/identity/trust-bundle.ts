import { X509Certificate } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { ZmeshError } from '../errors/index.js';

/**
 * The roots trusted for one trust domain. Several are trusted at once so that a root can
 * be rotated (docs/design.md §5): add the new one, wait for every leaf to be reissued, remove the
 * old. Emits 'change' (no arguments) after every effective add or remove, so TLS contexts
 * can be rebuilt for new handshakes.
 */
export class TrustBundle extends EventEmitter {
  readonly trustDomain: string;
  /** Keyed by SHA-256 fingerprint so the same root in other PEM spelling is one entry. */
  readonly #roots = new Map<string, string>();
  #generation = 0;

  constructor(trustDomain: string, rootsPem: string[] = []) {
    super();
    // One listener per HBONE listener (two per enrolled pod): hundreds is normal, and each
    // removes itself when its server stops.
    this.setMaxListeners(0);
    this.trustDomain = trustDomain;
    for (const pem of rootsPem) this.#put(pem);
  }

  add(rootPem: string): void {
    if (this.#put(rootPem)) this.#changed();
  }

  remove(rootPem: string): void {
    if (this.#roots.delete(fingerprint(rootPem))) this.#changed();
  }

  /** Goes up with every 'change': what was built from `roots()` at another one is stale. */
  get generation(): number {
    return this.#generation;
  }

  #changed(): void {
    this.#generation++;
    this.emit('change');
  }

  /** Canonical PEMs, in insertion order. */
  roots(): string[] {
    return [...this.#roots.values()];
  }

  #put(rootPem: string): boolean {
    const key = fingerprint(rootPem);
    if (this.#roots.has(key)) return false;
    this.#roots.set(key, new X509Certificate(rootPem).toString());
    return true;
  }
}

function fingerprint(pem: string): string {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch (e) {
    throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'unparseable trust root' }, { cause: e });
  }
  if (!cert.ca) throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'trust root is not a CA certificate' });
  return cert.fingerprint256;
}
