import { ZmeshError } from '../errors/index.js';
import { err, ok, type Result } from '../result.js';

/** Not-yet-authenticated connections one source address may hold on HBONE ports at once. */
export const DEFAULT_MAX_PREAUTH_PER_SOURCE = 64;
/** Not-yet-authenticated connections on HBONE ports at once, all sources together. */
export const DEFAULT_MAX_PREAUTH = 1024;

/** Asked before each accepted connection is handed to TLS: a refusal, or nothing to say. */
export interface ConnectionGate {
  check(source: string): ZmeshError | undefined;
}

/** A pre-authentication slot; release() is idempotent. */
export interface PreauthTicket {
  release(): void;
}

/**
 * Bounds connections that have not authenticated yet (accept → TLS → HTTP/2 preface →
 * first SETTINGS), per source address and in total. Such a connection costs an fd and a
 * TLS state and proves nothing, so a peer that cannot even present a certificate could
 * otherwise hold every fd of the process (issue 38). One instance is shared by every HBONE
 * listener of a process: the limits are the process's, not a pod's.
 */
export class PreauthLimiter {
  readonly perSource: number;
  readonly total: number;
  readonly #bySource = new Map<string, number>();
  #pending = 0;

  constructor(limits: { perSource?: number; total?: number } = {}) {
    this.perSource = limits.perSource ?? DEFAULT_MAX_PREAUTH_PER_SOURCE;
    this.total = limits.total ?? DEFAULT_MAX_PREAUTH;
  }

  get pending(): number {
    return this.#pending;
  }

  pendingFrom(source: string): number {
    return this.#bySource.get(source) ?? 0;
  }

  /** A slot for a new connection from `source`, or ZM_ERR_HBONE_PREAUTH_LIMIT naming the limit hit. */
  admit(source: string): Result<PreauthTicket, ZmeshError> {
    const fromSource = this.#bySource.get(source) ?? 0;
    if (this.#pending >= this.total) return err(this.#refusal(source, 'total', this.#pending, this.total));
    if (fromSource >= this.perSource) {
      return err(this.#refusal(source, 'source', fromSource, this.perSource));
    }
    this.#bySource.set(source, fromSource + 1);
    this.#pending++;
    let held = true;
    return ok({
      release: () => {
        if (!held) return;
        held = false;
        this.#pending--;
        const left = (this.#bySource.get(source) ?? 1) - 1;
        if (left > 0) this.#bySource.set(source, left);
        else this.#bySource.delete(source);
      },
    });
  }

  #refusal(source: string, scope: 'source' | 'total', pending: number, limit: number): ZmeshError {
    return new ZmeshError('ZM_ERR_HBONE_PREAUTH_LIMIT', { source, scope, pending, limit });
  }
}
