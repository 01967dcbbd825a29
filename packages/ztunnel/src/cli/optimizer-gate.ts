import { setFlagsFromString } from 'node:v8';
import { guardedInterval, logger } from '@zmesh/shared';

const log = logger('memory');

/**
 * The node flags that start a proxy with V8's optimizing compilers off (bin/zmesh gives them
 * to ztunnel). Node 24's V8 has two: Maglev (on by default since V8 11.7) optimises first,
 * TurboFan later; `--no-turbofan` alone still lets Maglev optimise all of start-up.
 */
export const DEFER_OPTIMIZER_FLAGS = ['--no-turbofan', '--no-maglev'] as const;
/** The flags that turn them back on; V8 reads them at each tier-up decision. */
const ENABLE_OPTIMIZER_FLAGS = '--maglev --turbofan';
/** How often the gate asks whether start-up is over. */
export const START_UP_POLL_MS = 250;
/**
 * The optimizer goes on this long after start at the latest, ready or not: a ztunnel that
 * cannot become ready (no CA, a pod's certificate refused) still serves its ready pods,
 * and their traffic deserves optimised code.
 */
export const START_UP_MAX_MS = 15_000;

export interface OptimizerGateInputs {
  /** Start-up is over (for ztunnel: ready, every enrolled workload configured and certified). */
  ready: () => boolean;
  /** Whether the optimizer is off now; default: this process was started with DEFER_OPTIMIZER_FLAGS. */
  deferred?: boolean;
  /** Turns the optimizer on; default V8's `--maglev --turbofan`, read at each tier-up decision. */
  enable?: () => void;
  pollMs?: number;
  maxMs?: number;
}

/**
 * Keeps V8's optimizing compilers (Maglev and TurboFan) off while a proxy starts, and turns it on once
 * start-up is over. Start-up runs code that never runs again at that volume: with 100 pods,
 * issuing and parsing 100 certificates, decoding config. V8 optimised it anyway, which left
 * TurboFan's own ~4 MB of the node binary and ~3.4 MB of anonymous memory resident in a
 * 100-pod ztunnel at rest (70.5 → 63.4 MB), and, on a proxy pinned to one CPU, its
 * compile jobs delayed readiness (ready after 2.0-2.4 s of CPU against 1.6-1.8 s
 * without). The data path runs after start-up, so it is optimised as before: V8 reads the
 * flag at each tier-up decision, and a function that ran (even baseline-compiled) while the
 * optimizer was off is optimised at its next budget interrupt once it is on.
 */
export class OptimizerGate {
  readonly #ready: () => boolean;
  readonly #enable: () => void;
  readonly #timer: NodeJS.Timeout | undefined;
  readonly #started = Date.now();
  readonly #maxMs: number;
  #on: boolean;

  constructor(inputs: OptimizerGateInputs) {
    this.#ready = inputs.ready;
    this.#enable = inputs.enable ?? (() => setFlagsFromString(ENABLE_OPTIMIZER_FLAGS));
    this.#maxMs = inputs.maxMs ?? START_UP_MAX_MS;
    this.#on = !(inputs.deferred ?? DEFER_OPTIMIZER_FLAGS.every((f) => process.execArgv.includes(f)));
    if (this.#on) return;
    this.#timer = guardedInterval('optimizer_gate', () => this.check(), inputs.pollMs ?? START_UP_POLL_MS);
    this.#timer.unref();
    this.check();
  }

  /** Whether the optimizer is on (it was never deferred, or start-up has ended). */
  get on(): boolean {
    return this.#on;
  }

  /** Turns the optimizer on if start-up is over or has lasted START_UP_MAX_MS. */
  check(): void {
    if (this.#on) return;
    const afterMs = Date.now() - this.#started;
    const ready = this.#ready();
    if (!ready && afterMs < this.#maxMs) return;
    this.#on = true;
    this.stop();
    this.#enable();
    log.info({ afterMs, ready }, 'optimizing compiler on: start-up is over');
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
