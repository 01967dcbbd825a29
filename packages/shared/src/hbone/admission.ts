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

/**
 * A count several threads share (ztunnel's workers map one SharedArrayBuffer): the
 * pre-authentication total here, the memory guard's bytes in ztunnel's tenancy.
 */
export interface SharedCount {
  load(): number;
  /** Adds `n` if the count stays at or under `limit`; false, unchanged, otherwise. */
  tryAdd(n: number, limit: number): boolean;
  add(n: number): void;
  sub(n: number): void;
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
  readonly #shared: SharedCount | undefined;

  /**
   * `shared`: the total is counted there, across every thread that maps it (ztunnel's
   * workers), so the node's total stays `total`; the per-source bound stays this thread's.
   */
  constructor(limits: { perSource?: number; total?: number; shared?: SharedCount } = {}) {
    this.perSource = limits.perSource ?? DEFAULT_MAX_PREAUTH_PER_SOURCE;
    this.total = limits.total ?? DEFAULT_MAX_PREAUTH;
    this.#shared = limits.shared;
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
    const shared = this.#shared;
    if (shared ? !shared.tryAdd(1, this.total) : this.#pending >= this.total)
      return err(this.#refusal(source, 'total', shared ? shared.load() : this.#pending, this.total));
    if (fromSource >= this.perSource) {
      shared?.sub(1);
      return err(this.#refusal(source, 'source', fromSource, this.perSource));
    }
    this.#bySource.set(source, fromSource + 1);
    this.#pending++;
    let held = true;
    return ok({
      release: () => {
        if (!held) return;
        held = false;
        shared?.sub(1);
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
