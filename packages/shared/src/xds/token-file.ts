import { readFile } from 'node:fs/promises';
import { logger } from '../log/logger.js';

const log = logger('token-file');

/**
 * A node bootstrap token read from `--token-file`. The proxies re-read it when the control
 * plane refuses the token they hold (UNAUTHENTICATED), so a token re-minted into the same
 * file after a control-plane key change is picked up without a restart.
 */
export class TokenFile {
  readonly path: string;
  #token: string;

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

  /** Re-reads the file; resolves true when the token changed. An unreadable file keeps the old token. */
  async reread(): Promise<boolean> {
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
      log.warn(
        { path: this.path },
        'control plane refused the node token and the token file has not changed',
      );
      return false;
    }
    this.#token = next;
    log.info({ path: this.path }, 'node token re-read from the token file');
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
