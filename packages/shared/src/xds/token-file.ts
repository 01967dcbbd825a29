import { type FSWatcher, watch } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { logger } from '../log/logger.js';
import { guarded, guardedInterval } from '../runtime/guarded-task.js';

const log = logger('token-file');

/** Changes seen by the directory watch are read once they settle (a writer's rename, a symlink swap). */
const TOKEN_DEBOUNCE_MS = 50;
/** The fallback poll, for file systems where fs.watch reports nothing (NFS, some overlays). */
const TOKEN_POLL_MS = 60_000;

/**
 * A node bootstrap token read from `--token-file`. Once `watch()`ed, a changed file is
 * re-read as soon as it changes (a watch on its directory, since a Kubernetes projected token
 * is swapped by renaming the `..data` symlink there, plus a slow poll as a fallback), so the
 * next connection or CSR carries the new token without waiting for a refusal (issue 33).
 * The proxies also re-read it when the control plane refuses the token they hold
 * (UNAUTHENTICATED), so a token re-minted after a control-plane key change is picked up
 * without a restart.
 */
export class TokenFile {
  readonly path: string;
  #token: string;
  #watcher: FSWatcher | undefined;
  #poll: NodeJS.Timeout | undefined;
  #debounce: NodeJS.Timeout | undefined;
  #loading: Promise<unknown> = Promise.resolve();

  private constructor(path: string, token: string) {
    this.path = path;
    this.#token = token;
  }

  /** Reads the file; throws (with the file's error) when it cannot be read or is empty. */
  static async read(path: string): Promise<TokenFile> {
    return new TokenFile(path, await readToken(path));
  }

  get token(): string {
    return this.#token;
  }

  /**
   * Follows the file from now on until `stop()`: each change is read (an unreadable or empty
   * file keeps the token held). `pollMs` is the fallback poll; `fsWatch: false` leaves only it.
   */
  watch(opts: { pollMs?: number; fsWatch?: boolean } = {}): void {
    if (this.#poll !== undefined) return;
    const check = guarded('token-file', () => this.#check());
    if (opts.fsWatch !== false) {
      try {
        // Not filtered by name: a projected token changes through `..data`, not `token`.
        this.#watcher = watch(dirname(this.path), () => {
          clearTimeout(this.#debounce);
          this.#debounce = setTimeout(check, TOKEN_DEBOUNCE_MS);
          this.#debounce.unref();
        });
        this.#watcher.on('error', (e) => {
          log.warn({ path: this.path, err: e.message }, 'token file watch failed; polling only');
          this.#watcher?.close();
          this.#watcher = undefined;
        });
        this.#watcher.unref();
      } catch (e) {
        log.warn({ path: this.path, err: (e as Error).message }, 'token file not watchable; polling only');
      }
    }
    this.#poll = guardedInterval('token-file', () => this.#check(), opts.pollMs ?? TOKEN_POLL_MS);
    this.#poll.unref();
  }

  stop(): void {
    clearTimeout(this.#debounce);
    clearInterval(this.#poll);
    this.#poll = undefined;
    this.#watcher?.close();
    this.#watcher = undefined;
  }

  /** One read at a time; a change seen by the watch or the poll. */
  #check(): Promise<unknown> {
    this.#loading = this.#loading.then(() => this.#load('changed'));
    return this.#loading;
  }

  /** Re-reads the file; resolves true when the token changed. An unreadable file keeps the old token. */
  async reread(): Promise<boolean> {
    return this.#load('refused');
  }

  async #load(why: 'changed' | 'refused'): Promise<boolean> {
    let next: string;
    try {
      next = await readToken(this.path);
    } catch (e) {
      log.warn(
        { path: this.path, err: (e as Error).message },
        'token file unreadable; keeping the token held',
      );
      return false;
    }
    if (next === this.#token) {
      if (why === 'changed') return false;
      log.warn(
        { path: this.path },
        'control plane refused the node token and the token file has not changed',
      );
      return false;
    }
    this.#token = next;
    log.info(
      { path: this.path, why },
      why === 'changed'
        ? 'token file changed; new node token used from the next request'
        : 'node token re-read from the token file',
    );
    return true;
  }
}

async function readToken(path: string): Promise<string> {
  const token = (await readFile(path, 'utf8')).trim();
  if (token === '') throw new Error(`${path} is empty`);
  return token;
}

/** `--xds a,b,…`: the control-plane addresses a proxy fails over between, in order. */
export function splitAddresses(address: string): string[] {
  const list = address
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  return list.length > 0 ? list : [address];
}
