import type { KeyObject } from 'node:crypto';
import { isIP } from 'node:net';
import { ZmeshError } from '../errors/index.js';
import {
  authorityKeyIdentifier,
  basicConstraints,
  Certificate,
  extendedKeyUsage,
  KeyUsage,
  keyUsage,
  name,
  OIDS,
  serverSubjectAltName,
  signCertificate,
  subjectKeyIdentifier,
  uriSubjectAltName,
} from './certificate.js';
import type { Credential } from './credential.js';
import { generateCsr } from './credential.js';
import { type CertificateRequest, parseCsr } from './csr.js';
import { toPem } from './der.js';
import { exportKeyPem, generateP256, importKeyPem, isP256, randomSerial, spkiOf } from './keys.js';
import { parseSpiffeId, trustDomainReasons } from './spiffe-id.js';

/** Root lifetime when none is given: one year. */
export const DEFAULT_ROOT_TTL_SECONDS = 365 * 24 * 3600;

/**
 * A root CA issuing X.509-SVIDs (SPIFFE X509-SVID §4-5) for one trust domain. The control
 * plane's CA server and the tests' fake CA both use this; it holds the root key in memory.
 */
export class CertificateAuthority {
  readonly trustDomain: string;
  readonly rootPem: string;
  readonly #root: Certificate;
  readonly #key: KeyObject;
  /** Set only for a root made by create(): a loaded key is not handed out again. */
  #exportable: KeyObject | undefined;

  private constructor(trustDomain: string, root: Certificate, key: KeyObject) {
    this.trustDomain = trustDomain;
    this.#root = root;
    this.rootPem = root.toPem();
    this.#key = key;
  }

  /** A fresh self-signed P-256 root. Returns the key PEM through `exportKeyPem()` for persistence. */
  static async create(opts: { trustDomain: string; rootTtlSeconds?: number }): Promise<CertificateAuthority> {
    checkTrustDomain(opts.trustDomain);
    const keys = await generateP256();
    const spki = spkiOf(keys.publicKey);
    const subject = name([
      [OIDS.organization, 'zmesh'],
      [OIDS.commonName, `${opts.trustDomain} root`],
    ]);
    const now = new Date();
    const der = signCertificate(
      {
        serial: randomSerial(),
        issuer: subject,
        subject,
        notBefore: now,
        notAfter: new Date(now.getTime() + (opts.rootTtlSeconds ?? DEFAULT_ROOT_TTL_SECONDS) * 1000),
        spki,
        extensions: [
          basicConstraints(true),
          keyUsage(KeyUsage.keyCertSign | KeyUsage.cRLSign | KeyUsage.digitalSignature),
          // SPIFFE X509-SVID §4.1: a signing certificate may carry the trust domain's ID.
          uriSubjectAltName([`spiffe://${opts.trustDomain}`], false),
          subjectKeyIdentifier(spki),
        ],
      },
      keys.privateKey,
    );
    const ca = new CertificateAuthority(opts.trustDomain, Certificate.from(der), keys.privateKey);
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
    const root = Certificate.parse(opts.certPem);
    if (!root.ok) throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: root.error.join('; ') });
    if (!root.value.isCa)
      throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'CA certificate is not a CA' });
    let key: KeyObject;
    try {
      key = importKeyPem(opts.keyPem);
    } catch (e) {
      throw new ZmeshError(
        'ZM_ERR_CERT_INVALID',
        { reason: `CA key: ${(e as Error).message}` },
        { cause: e },
      );
    }
    if (!spkiOf(key).equals(root.value.spki)) {
      throw new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'CA key does not match CA certificate' });
    }
    return new CertificateAuthority(opts.trustDomain, root.value, key);
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
    const csr = checkedCsr(csrPem, opts.identity);
    const notBefore = opts.notBefore ?? new Date();
    const wanted = notBefore.getTime() + opts.ttlSeconds * 1000;
    // A leaf must not outlive the root that vouches for it.
    const notAfter = new Date(Math.min(wanted, this.#root.notAfter.getTime()));
    const leaf = signCertificate(
      {
        serial: randomSerial(),
        issuer: this.#root.subjectDer,
        subject: name([]),
        notBefore,
        notAfter,
        spki: csr.spki,
        extensions: leafExtensions(opts.identity, csr, this.#root),
      },
      this.#key,
    );
    return [toPem(leaf, 'CERTIFICATE'), this.rootPem];
  }

  /** Generates a key and certifies it: the tests' and the harness's shortcut. */
  async issue(identity: string, ttlSeconds: number, opts: { notBefore?: Date } = {}): Promise<Credential> {
    this.#checkIdentity(identity);
    const { keyPem, csrPem } = await generateCsr(identity);
    const chain = await this.signCsr(csrPem, { identity, ttlSeconds, ...opts });
    const leaf = Certificate.from(chain[0]!);
    return { identity, keyPem, certChainPem: chain, notBefore: leaf.notBefore, notAfter: leaf.notAfter };
  }

  /**
   * A TLS serving certificate for the control plane itself (istiod's DNS certificate): a
   * fresh P-256 key, DNS and IP SANs only (no SPIFFE ID, so no workload can present it as
   * an identity), serverAuth only. Proxies verify it against the mesh roots they load.
   */
  async issueServing(opts: {
    dnsNames: readonly string[];
    ips: readonly string[];
    ttlSeconds: number;
  }): Promise<{
    keyPem: string;
    certChainPem: string[];
    notAfter: Date;
  }> {
    const reasons = [
      ...opts.dnsNames.filter((d) => !isDnsName(d)).map((d) => `${JSON.stringify(d)} is not a DNS name`),
      ...opts.ips.filter((ip) => isIP(ip) === 0).map((ip) => `${JSON.stringify(ip)} is not an IP address`),
    ];
    if (opts.dnsNames.length + opts.ips.length === 0) reasons.push('no DNS name or IP to certify');
    if (reasons.length > 0)
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: 'serving certificate',
        reason: reasons.join('; '),
      });
    const { privateKey, publicKey } = await generateP256();
    const spki = spkiOf(publicKey);
    const notBefore = new Date(Date.now() - 60_000);
    const notAfter = new Date(Math.min(Date.now() + opts.ttlSeconds * 1000, this.#root.notAfter.getTime()));
    const leaf = signCertificate(
      {
        serial: randomSerial(),
        issuer: this.#root.subjectDer,
        subject: name([]),
        notBefore,
        notAfter,
        spki,
        extensions: [
          basicConstraints(false),
          keyUsage(KeyUsage.digitalSignature),
          extendedKeyUsage([OIDS.serverAuth]),
          serverSubjectAltName(opts.dnsNames, opts.ips.map(ipBytes), true),
          subjectKeyIdentifier(spki),
          authorityKeyIdentifier(this.#root.keyId),
        ],
      },
      this.#key,
    );
    return {
      keyPem: exportKeyPem(privateKey),
      certChainPem: [toPem(leaf, 'CERTIFICATE'), this.rootPem],
      notAfter,
    };
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

function isDnsName(d: string): boolean {
  return d.length <= 253 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/i.test(d);
}

/** 4 or 16 bytes of an IP literal (checked by the caller). */
function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split('.').map(Number));
  const [head = '', tail = ''] = ip.split('::') as [string, string?];
  const h = head === '' ? [] : head.split(':');
  const t = ip.includes('::') && tail !== '' ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  return Buffer.from(
    groups.flatMap((g) => {
      const n = Number.parseInt(g, 16);
      return [n >> 8, n & 0xff];
    }),
  );
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

function checkedCsr(csrPem: string, identity: string): CertificateRequest {
  const csr = parseCsr(csrPem);
  if (!csr.ok) throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity, reason: csr.error.join('; ') });
  if (!isP256(csr.value.publicKey)) {
    throw new ZmeshError('ZM_ERR_CA_REFUSED', { identity, reason: 'CSR key is not ECDSA P-256' });
  }
  return csr.value;
}

function leafExtensions(identity: string, csr: CertificateRequest, root: Certificate): Buffer[] {
  return [
    basicConstraints(false),
    // keyEncipherment is for RSA key transport; an EC key only signs (RFC 8813 §3).
    keyUsage(KeyUsage.digitalSignature),
    extendedKeyUsage([OIDS.serverAuth, OIDS.clientAuth]),
    // The subject is empty, so the SAN is critical (RFC 5280 §4.2.1.6).
    uriSubjectAltName([identity], true),
    subjectKeyIdentifier(csr.spki),
    authorityKeyIdentifier(root.keyId),
  ];
}
