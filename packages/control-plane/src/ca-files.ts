import { X509Certificate } from 'node:crypto';
import { mkdir, open, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { CertificateAuthority, logger } from '@zmesh/shared';
import type { SharedStateStore, StateStore } from './store/state-store.js';

const log = logger('ca-files');

export const ROOT_CERT_FILE = 'root-cert.pem';
export const ROOT_KEY_FILE = 'root-key.pem';

/**
 * The control plane's CA: loaded from `dir` (root-cert.pem, root-key.pem), or created — and,
 * when `dir` is given, written there (key mode 0600) so a restart keeps the same root.
 */
export async function loadOrCreateCa(trustDomain: string, dir?: string): Promise<CertificateAuthority> {
  if (dir !== undefined) {
    const existing = await readPair(dir);
    if (existing) return CertificateAuthority.fromPem({ trustDomain, ...existing });
  }
  const ca = await CertificateAuthority.create({ trustDomain });
  if (dir !== undefined) {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await writeFile(join(dir, ROOT_KEY_FILE), await ca.exportKeyPem(), { mode: 0o600, flag: 'wx' });
    await writeFile(join(dir, ROOT_CERT_FILE), ca.rootPem, { mode: 0o644, flag: 'wx' });
    log.info({ dir }, 'created a new root CA');
  }
  return ca;
}

/**
 * The CA's share of `/healthz/ready`: why it cannot sign now (its root expired or not yet
 * valid: every certificate it signed would be refused), or undefined while it can.
 */
export function caReadiness(rootPem: string, now: () => number = Date.now): () => string | undefined {
  const root = new X509Certificate(rootPem);
  return () => {
    const at = now();
    if (at >= root.validToDate.getTime()) return `CA root expired at ${root.validToDate.toISOString()}`;
    if (at < root.validFromDate.getTime())
      return `CA root not valid before ${root.validFromDate.toISOString()} (clock?)`;
    return undefined;
  };
}

const CA_CERT = 'ca-root-cert';
const CA_KEY = 'ca-root-key';

/**
 * The CA kept in the state store (without --ca-dir): loaded, or created and committed there
 * (certificate and key in one transaction), so a restart keeps the same root.
 */
export async function loadOrCreateCaInStore(
  trustDomain: string,
  state: StateStore,
): Promise<CertificateAuthority> {
  const certPem = state.getMeta(CA_CERT);
  const keyPem = state.getMeta(CA_KEY);
  if (certPem !== undefined && keyPem !== undefined)
    return CertificateAuthority.fromPem({ trustDomain, certPem, keyPem });
  const ca = await CertificateAuthority.create({ trustDomain });
  state.putMeta({ [CA_CERT]: ca.rootPem, [CA_KEY]: await ca.exportKeyPem() });
  log.info({ store: state.location }, 'created a new root CA');
  return ca;
}

const CA_PAIR = 'ca-root';

/**
 * The CA kept in a shared store: created once (certificate and key as one value, by
 * whichever replica asks first), so every replica signs under the same root.
 */
export async function loadOrCreateCaInShared(
  trustDomain: string,
  shared: SharedStateStore,
): Promise<CertificateAuthority> {
  const pair = await shared.metaOrCreate(CA_PAIR, async () => {
    const ca = await CertificateAuthority.create({ trustDomain });
    log.info({ store: shared.location }, 'created a new root CA');
    return JSON.stringify({ certPem: ca.rootPem, keyPem: await ca.exportKeyPem() });
  });
  const { certPem, keyPem } = JSON.parse(pair) as { certPem: string; keyPem: string };
  return CertificateAuthority.fromPem({ trustDomain, certPem, keyPem });
}

async function readPair(dir: string): Promise<{ certPem: string; keyPem: string } | undefined> {
  try {
    return {
      certPem: await readFile(join(dir, ROOT_CERT_FILE), 'utf8'),
      keyPem: await readFile(join(dir, ROOT_KEY_FILE), 'utf8'),
    };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

/**
 * Writes the roots proxies trust (concatenated PEM) atomically: temp file, fsync, rename,
 * so a watcher never reads half a file (and refuses one that it somehow does).
 */
export async function writeRootsFile(path: string, rootsPem: readonly string[]): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  const handle = await open(tmp, 'w', 0o644);
  try {
    await handle.writeFile(`${rootsPem.map((p) => p.trim()).join('\n')}\n`);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(tmp, path);
}
