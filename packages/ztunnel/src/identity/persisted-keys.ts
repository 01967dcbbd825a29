import { createHash, randomBytes } from 'node:crypto';
import { open, readdir, readFile, rename, stat, statfs, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import {
  type Credential,
  err,
  logger,
  ok,
  type Result,
  type TrustBundle,
  validateSvid,
  ZmeshError,
} from '@zmesh/shared';
import type { CredentialStore } from './cert-manager.js';
import { toCredential } from './credential.js';

const log = logger('persisted-keys');

/** statfs(2) f_type of tmpfs (linux/magic.h TMPFS_MAGIC): keys must never reach a disk. */
export const TMPFS_MAGIC = 0x01021994;
/** More files than this in the directory is not a node's worth of identities: stop reading. */
const MAX_PERSISTED_IDENTITIES = 4096;
const SUFFIX = '.key.json';

interface Stored {
  identity: string;
  keyPem: string;
  chain: string[];
}

/**
 * Opt-in (`--persist-keys DIR`) copies of workload keys and certificates, so a ztunnel
 * restarted while the CA is unreachable serves at once instead of waiting for it. The
 * directory must be tmpfs (keys never touch a disk), owned by this process's user and
 * closed to everyone else (mode 0700); each file is written 0600, atomically. The cost:
 * a root compromise of the node can read keys at rest, not only in process memory.
 */
export class PersistedKeys {
  private constructor(readonly dir: string) {}

  /** Checks the directory is a private tmpfs; every reason it is not is returned. */
  static async open(dir: string, uid = process.getuid?.() ?? 0): Promise<Result<PersistedKeys>> {
    const reasons: string[] = [];
    try {
      const [st, fs] = await Promise.all([stat(dir), statfs(dir)]);
      if (!st.isDirectory()) reasons.push('not a directory');
      if (fs.type !== TMPFS_MAGIC) reasons.push(`not tmpfs (f_type 0x${fs.type.toString(16)})`);
      if (st.uid !== uid) reasons.push(`owned by uid ${st.uid}, not ${uid}`);
      if ((st.mode & 0o077) !== 0) reasons.push(`mode ${(st.mode & 0o777).toString(8)} is open to others`);
    } catch (e) {
      reasons.push((e as Error).message);
    }
    return reasons.length ? err(reasons) : ok(new PersistedKeys(dir));
  }

  /** Writes (or replaces) one identity's key and chain. */
  async save(cred: Credential): Promise<void> {
    const body: Stored = { identity: cred.identity, keyPem: cred.keyPem, chain: cred.certChainPem };
    const path = this.pathOf(cred.identity);
    const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
    const handle = await open(tmp, 'wx', 0o600);
    try {
      await handle.writeFile(JSON.stringify(body));
    } finally {
      await handle.close();
    }
    await rename(tmp, path);
  }

  async remove(identity: string): Promise<void> {
    await unlink(this.pathOf(identity)).catch(() => {});
  }

  /**
   * `identity`'s stored credential while valid at `now`. An expired or unreadable file is
   * left for the next start's `prune` and replaced by the next `save`: workers share the
   * directory, and deleting here could remove a fresh key another worker just renamed in.
   */
  async load(identity: string, now = Date.now()): Promise<Credential | undefined> {
    const path = this.pathOf(identity);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch {
      return undefined;
    }
    try {
      const s = JSON.parse(text) as Stored;
      if (s.identity !== identity) throw new Error(`holds ${String(s.identity)}`);
      const cred = toCredential(s.identity, s.keyPem, s.chain);
      if (cred.notAfter.getTime() > now) return cred;
    } catch (e) {
      log.warn({ path, err: (e as Error).message }, 'persisted key unreadable: not used');
    }
    return undefined;
  }

  /**
   * Deletes expired and unreadable files, so identities that never come back do not stay
   * at rest (run once at start; valid files wait for their identity's first request).
   */
  async prune(now = Date.now()): Promise<number> {
    const names = (await readdir(this.dir))
      .filter((n) => n.endsWith(SUFFIX))
      .slice(0, MAX_PERSISTED_IDENTITIES);
    let removed = 0;
    for (const name of names) {
      const path = join(this.dir, name);
      let keep = false;
      try {
        const s = JSON.parse(await readFile(path, 'utf8')) as Stored;
        keep =
          this.pathOf(s.identity) === path &&
          toCredential(s.identity, s.keyPem, s.chain).notAfter.getTime() > now;
      } catch (e) {
        log.warn({ path, err: (e as Error).message }, 'persisted key unreadable: removed');
      }
      if (!keep) {
        await unlink(path).catch(() => {});
        removed += 1;
      }
    }
    return removed;
  }

  private pathOf(identity: string): string {
    return join(this.dir, `${createHash('sha256').update(identity).digest('hex').slice(0, 32)}${SUFFIX}`);
  }
}

/**
 * The certificate manager's view of a key directory (its `store`): a kept credential comes
 * back only while the current roots still vouch for it under its own identity, since the
 * roots may have rotated while the process was down.
 */
export function keptCredentials(keys: PersistedKeys, bundle: TrustBundle): CredentialStore {
  return {
    async load(identity) {
      const cred = await keys.load(identity);
      if (!cred) return undefined;
      const svid = validateSvid(cred.certChainPem, { roots: bundle.roots() });
      if (svid.ok && svid.value.identity === identity) return cred;
      log.warn({ identity }, 'persisted certificate no longer valid here: not adopted');
      return undefined;
    },
    save: (cred) => keys.save(cred),
  };
}

export function keysDirError(dir: string, reasons: string[]): ZmeshError {
  return new ZmeshError('ZM_ERR_CERT_KEYS_DIR_UNSAFE', { dir, reason: reasons.join('; ') });
}
