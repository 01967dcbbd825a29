import { ZmeshError } from '../errors/index.js';
import type { Credential } from './credential.js';
import { generateCsr } from './credential.js';
import { parseSpiffeId, trustDomainReasons } from './spiffe-id.js';
import {
  EC_P256,
  exportKeyPem,
  importKeyPem,
  type Key,
  type KeyPair,
  randomSerial,
  subtle,
  x509,
} from './x509.js';

/** Root lifetime when none is given: one year. */
export const DEFAULT_ROOT_TTL_SECONDS = 365 * 24 * 3600;

/**
 * A root CA issuing X.509-SVIDs (SPIFFE X509-SVID §4-5) for one trust domain. The control
 * plane's CA server and the tests' fake CA both use this; it holds the root key in memory.
 */
export class CertificateAuthority {
  readonly trustDomain: string;
  readonly rootPem: string;
  readonly #root: x509.X509Certificate;
  readonly #key: Key;
  /** Set only for a root made by create(); a loaded key stays non-extractable. */
  #exportable: Key | undefined;

  private constructor(trustDomain: string, root: x509.X509Certificate, key: Key) {
    this.trustDomain = trustDomain;
    this.#root = root;
    this.rootPem = root.toString('pem');
    this.#key = key;
  }

  /** A fresh self-signed P-256 root. Returns the key PEM through `exportKeyPem()` for persistence. */
  static async create(opts: { trustDomain: string; rootTtlSeconds?: number }): Promise<CertificateAuthority> {
    checkTrustDomain(opts.trustDomain);
    const keys = (await subtle.generateKey(EC_P256, true, ['sign', 'verify'])) as unknown as KeyPair;
    const now = new Date();
    const root = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: randomSerial(),
      name: `O=zmesh, CN=${opts.trustDomain} root`,
      keys,
      notBefore: now,
      notAfter: new Date(now.getTime() + (opts.rootTtlSeconds ?? DEFAULT_ROOT_TTL_SECONDS) * 1000),
      signingAlgorithm: EC_P256,
      extensions: [
        new x509.BasicConstraintsExtension(true, undefined, true),
        new x509.KeyUsagesExtension(
          x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature,
          true,
        ),
        // SPIFFE X509-SVID §4.1: a signing certificate may carry the trust domain's ID.
        new x509.SubjectAlternativeNameExtension([{ type: 'url', value: `spiffe://${opts.trustDomain}` }]),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const ca = new CertificateAuthority(opts.trustDomain, root, keys.privateKey);
    ca.#exportable = keys.privateKey;
    return ca;
  }

  /** Loads a persistent root (PKCS#8 P-256 key + its self-signed CA certificate). */
  static async fromPem(opts: {
    trustDomain: string;
    keyPem: string;
    certPem: string;
  }): Promise<CertificateAuthority> {
    checkTrustDomain(opts.trustDomain);
    const root = new x509.X509Certificate(opts.certPem);
    if (root.getExtension(x509.BasicConstraintsExtension)?.ca !== true) {
      throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'CA certificate is not a CA' });
    }
    const key = await importKeyPem(opts.keyPem);
    const probe = new Uint8Array([1, 2, 3]);
    const sig = await subtle.sign(EC_P256, key, probe);
    if (!(await subtle.verify(EC_P256, (await root.publicKey.export()) as unknown as Key, sig, probe))) {
      throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'CA key does not match CA certificate' });
    }
    return new CertificateAuthority(opts.trustDomain, root, key);
  }

  /** The root key as PKCS#8 PEM, for a CA made by `create()`; loaded keys stay non-extractable. */
  async exportKeyPem(): Promise<string> {
    if (this.#exportable === undefined)
      throw new ZmeshError('ZM_ERR_INTERNAL_FAULT', { reason: 'CA key not exportable' });
    return exportKeyPem(this.#exportable);
  }

  /**
   * Certifies the CSR's key for `identity`. What the CSR asks for (subject, SANs,
   * extensions) is ignored: the caller has authenticated who may hold `identity`.
   */
  async signCsr(
    csrPem: string,
    opts: { identity: string; ttlSeconds: number; notBefore?: Date },
  ): Promise<string[]> {
    this.#checkIdentity(opts.identity);
    if (!Number.isFinite(opts.ttlSeconds) || opts.ttlSeconds <= 0) {
      throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity: opts.identity, reason: 'ttl must be positive' });
    }
    const csr = await parseCsr(csrPem, opts.identity);
    const notBefore = opts.notBefore ?? new Date();
    const wanted = notBefore.getTime() + opts.ttlSeconds * 1000;
    // A leaf must not outlive the root that vouches for it.
    const notAfter = new Date(Math.min(wanted, this.#root.notAfter.getTime()));
    const leaf = await x509.X509CertificateGenerator.create({
      serialNumber: randomSerial(),
      subject: '',
      issuer: this.#root.subjectName,
      notBefore,
      notAfter,
      publicKey: csr.publicKey,
      signingKey: this.#key,
      signingAlgorithm: EC_P256,
      extensions: await leafExtensions(opts.identity, csr, this.#root),
    });
    return [leaf.toString('pem'), this.rootPem];
  }

  /** Generates a key and certifies it: the tests' and the harness's shortcut. */
  async issue(identity: string, ttlSeconds: number, opts: { notBefore?: Date } = {}): Promise<Credential> {
    this.#checkIdentity(identity);
    const { keyPem, csrPem } = await generateCsr(identity);
    const chain = await this.signCsr(csrPem, { identity, ttlSeconds, ...opts });
    const leaf = new x509.X509Certificate(chain[0]!);
    return { identity, keyPem, certChainPem: chain, notBefore: leaf.notBefore, notAfter: leaf.notAfter };
  }

  #checkIdentity(identity: string): void {
    const id = parseSpiffeId(identity);
    if (!id.ok) throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity, reason: id.error.join('; ') });
    if (id.value.trustDomain !== this.trustDomain) {
      throw new ZmeshError('ZM_ERR_CA_REFUSED', {
        identity,
        reason: `not in trust domain ${this.trustDomain}`,
      });
    }
  }
}

function checkTrustDomain(trustDomain: string): void {
  const reasons = trustDomainReasons(trustDomain);
  if (reasons.length > 0) {
    throw new ZmeshError('ZM_ERR_SPIFFE_INVALID', {
      id: `spiffe://${trustDomain}`,
      reason: reasons.join('; '),
    });
  }
}

async function parseCsr(csrPem: string, identity: string): Promise<x509.Pkcs10CertificateRequest> {
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(csrPem);
  } catch (e) {
    throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity, reason: 'unparseable CSR' }, { cause: e });
  }
  const alg = csr.publicKey.algorithm as { name?: string; namedCurve?: string };
  if (alg.name !== 'ECDSA' || alg.namedCurve !== 'P-256') {
    throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity, reason: 'CSR key is not ECDSA P-256' });
  }
  const valid = await csr.verify().catch(() => false);
  if (!valid)
    throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity, reason: 'CSR signature does not verify' });
  return csr;
}

async function leafExtensions(
  identity: string,
  csr: x509.Pkcs10CertificateRequest,
  root: x509.X509Certificate,
): Promise<x509.Extension[]> {
  return [
    new x509.BasicConstraintsExtension(false, undefined, true),
    // keyEncipherment is for RSA key transport; an EC key only signs (RFC 8813 §3).
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
    new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
    // The subject is empty, so the SAN is critical (RFC 5280 §4.2.1.6).
    new x509.SubjectAlternativeNameExtension([{ type: 'url', value: identity }], true),
    await x509.SubjectKeyIdentifierExtension.create(csr.publicKey),
    await x509.AuthorityKeyIdentifierExtension.create(root.publicKey),
  ];
}
