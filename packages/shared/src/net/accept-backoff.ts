import type { ListenOptions, Server } from 'node:net';
import { Counter, type Registry } from 'prom-client';
import { ZmeshError } from '../errors/index.js';
import { logger } from '../log/index.js';

const log = logger('net');
const METRIC = 'zmesh_accept_paused_total';

/** First pause after EMFILE/ENFILE on accept; doubled on each further one, up to ACCEPT_PAUSE_MAX_MS. */
export const ACCEPT_PAUSE_MIN_MS = 100;
export const ACCEPT_PAUSE_MAX_MS = 5_000;
/** Listening this long without running out of fds again starts the next pause from the minimum. */
const CALM_MS = 30_000;

/** One counter for the process (a test process runs several proxies), like zmesh_task_failures_total. */
const pauses = new Counter({
  name: METRIC,
  help: 'Times a listener stopped accepting for a while because the process or system ran out of file descriptors (EMFILE/ENFILE)',
  labelNames: ['listener'],
  registers: [],
});

/** Makes zmesh_accept_paused_total{listener} visible in `registry` (idempotent). */
export function registerAcceptPauses(registry: Registry): void {
  if (registry.getSingleMetric(METRIC) === undefined) registry.registerMetric(pauses);
}

/** Pauses counted so far for `listener` (tests). */
export async function acceptPauses(listener: string): Promise<number> {
  const values = (await pauses.get()).values;
  return values.find((v) => v.labels.listener === listener)?.value ?? 0;
}

export function isFdExhaustion(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException)?.code;
  return code === 'EMFILE' || code === 'ENFILE';
}

export interface AcceptBackoffTiming {
  minMs?: number;
  maxMs?: number;
}

/**
 * Stops a listener accepting for a short, growing interval when accept fails for want of
 * fds (issue 38), then listens again on the same address. libuv already closes the backlog
 * on EMFILE, so a listener left open only turns every new connection into one more failed
 * accept and log line; closed, the kernel refuses them (RST) for the pause, and the fds of
 * established flows drain. The pause doubles from `minMs` to `maxMs` while EMFILE keeps
 * coming back. A listener on an inherited fd (`{ fd }`) cannot be re-opened once closed: it
 * keeps listening and only the log line and the metric remain (one line per pause interval).
 *
 * The server's own `close()` is wrapped so that closing it during a pause cancels the
 * resume and still calls back.
 */
export class AcceptBackoff {
  readonly #server: Server;
  readonly #opts: ListenOptions | { fd: number };
  readonly #name: string;
  readonly #close: Server['close'];
  readonly #minMs: number;
  readonly #maxMs: number;
  #delayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #resumeOpts: ListenOptions | undefined;
  #resuming = false;
  #stopped = false;
  #resumedAt = Number.NEGATIVE_INFINITY;

  constructor(
    server: Server,
    opts: ListenOptions | { fd: number },
    name: string,
    timing: AcceptBackoffTiming = {},
  ) {
    this.#server = server;
    this.#opts = opts;
    this.#name = name;
    this.#minMs = timing.minMs ?? ACCEPT_PAUSE_MIN_MS;
    this.#maxMs = timing.maxMs ?? ACCEPT_PAUSE_MAX_MS;
    this.#delayMs = this.#minMs;
    const close = server.close.bind(server);
    this.#close = close;
    server.close = (cb?: (err?: Error) => void) => {
      const paused = this.paused;
      this.#stop();
      if (paused && !server.listening) {
        if (cb) queueMicrotask(() => cb());
        return server;
      }
      return close(cb);
    };
  }

  /** Not accepting now, waiting to listen again. */
  get paused(): boolean {
    return this.#timer !== undefined || this.#resuming;
  }

  /** The pause the next EMFILE/ENFILE will start. */
  get nextDelayMs(): number {
    return this.#delayMs;
  }

  /**
   * An error from the listening server. True if it was fd exhaustion (or a failed resume)
   * and is handled here; false for anything else, which the caller reports.
   */
  handle(e: Error): boolean {
    if (this.#resuming) {
      this.#resuming = false;
      this.#pause(e, false);
      return true;
    }
    if (!isFdExhaustion(e)) return false;
    if (this.#timer !== undefined || this.#stopped) return true;
    this.#pause(e, 'fd' in this.#opts);
    return true;
  }

  #pause(e: Error, keepListening: boolean): void {
    if (performance.now() - this.#resumedAt > CALM_MS && !this.#resuming) this.#delayMs = this.#minMs;
    const delayMs = this.#delayMs;
    this.#delayMs = Math.min(this.#maxMs, delayMs * 2);
    pauses.inc({ listener: this.#name });
    const error = new ZmeshError('ZM_ERR_ACCEPT_FD_EXHAUSTED', {
      listener: this.#name,
      errno: (e as NodeJS.ErrnoException).code ?? e.message,
      delayMs,
    });
    log.warn(
      { listener: this.#name, code: error.code, err: error.message, delayMs, keepListening },
      error.message,
    );
    if (!keepListening && this.#server.listening) {
      const addr = this.#server.address();
      this.#resumeOpts =
        addr !== null && typeof addr === 'object'
          ? { ...(this.#opts as ListenOptions), port: addr.port }
          : (this.#opts as ListenOptions);
      this.#close();
    }
    this.#timer = setTimeout(() => this.#resume(keepListening), delayMs);
  }

  #resume(keepListening: boolean): void {
    this.#timer = undefined;
    if (this.#stopped || keepListening || this.#server.listening) return;
    this.#resuming = true;
    try {
      this.#server.listen(this.#resumeOpts, () => {
        this.#resuming = false;
        this.#resumedAt = performance.now();
        log.info({ listener: this.#name }, 'accepting again after running out of file descriptors');
      });
    } catch (e) {
      this.#resuming = false;
      this.#pause(e as Error, false);
    }
  }

  #stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
