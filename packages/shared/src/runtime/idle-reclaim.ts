import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { Counter, Gauge, type Registry } from 'prom-client';
import { logger } from '../log/index.js';
import { guardedInterval } from './guarded-task.js';
import { utilizationProbe } from './loop-utilization.js';
import { mallocTrim } from './malloc-trim.js';

const log = logger('memory');

/** How often event-loop utilisation is sampled. */
export const RECLAIM_SAMPLE_MS = 2000;
/** A sample at or above this utilisation marks the process busy (it allocated since). */
export const BUSY_UTILIZATION = 0.02;
/** A sample below this one, after a busy one, starts the quiet a reclaim waits for; a busy one ends it. */
export const QUIET_UTILIZATION = 0.01;
/**
 * How long a busy process stays quiet before it reclaims (with 2 s samples, at the fourth
 * after the quiet began), counted from a young-generation collection run when the quiet
 * begins. V8 gives its young generation back (up to 64 MB on Node 24, which the waypoint
 * keeps at its default size) at a full collection only when its allocation rate, measured
 * from one collection to the next, has fallen low. Without the young collection at the
 * start, the reclaim's measure covers the end of the busy period too: after its start-up
 * warm-up a waypoint's reclaim kept the young generation; with it, the reclaim gave it back
 * (Node 20: RSS 93-94 → 69-70 MB). Node 20's V8 judged the rate low 5 s after the young
 * collection; Node 24's smooths it and judged it low at 5.5-7 s only sometimes (the young
 * generation test kept 64 MB in 3 of 4 runs at 5.5 s), hence 7.5 s, and even then it kept
 * it one run in six: Node 24's V8 smooths the rate over several collections, so every quiet
 * sample before the reclaim runs a young collection too (each of an almost empty young
 * generation, under a millisecond), and the test gave it back 24 runs of 24 against 20 of 24
 * with the one collection, in the same run (docs/performance.md). V8's memory-reducing
 * collection (gc flavor `last-resort`) always gives it back, but paused a 100-pod ztunnel
 * for 1.9 s on a loaded machine, and that pause then spaced reclaims 190 s apart.
 */
export const QUIET_BEFORE_RECLAIM_MS = 7500;
/**
 * A reclaim's pause may cost at most this share of the time between two: the next one
 * waits at least `pause / MAX_PAUSE_SHARE` (and at least `MIN_GAP_MS`), so traffic that
 * bursts and rests cannot turn reclaims into a steady tax.
 */
export const MAX_PAUSE_SHARE = 0.01;
export const MIN_GAP_MS = 5000;

export interface IdleReclaimInputs {
  registry: Registry;
  /** Event-loop utilisation (0–1) since the previous call; default `performance.eventLoopUtilization`. */
  utilization?: () => number;
  /** A full collection; default a compacting `globalThis.gc` when node runs with `--expose-gc`, else none. */
  collect?: (() => void) | undefined;
  /** A young-generation collection, run at each quiet sample before the reclaim; default `globalThis.gc` (minor) likewise. */
  scavenge?: (() => void) | undefined;
  /** Hands malloc's free pages back to the kernel; default glibc `malloc_trim(0)`. */
  trim?: () => void;
  rss?: () => number;
  now?: () => number;
  sampleMs?: number;
}

/**
 * Gives memory back once the data path has gone quiet after work. ztunnel's heap is sized
 * for throughput (a 128 MB first old-generation limit, see bin/zmesh), so after a burst of
 * traffic the heap holds up to that much garbage, and glibc keeps freed TLS and HTTP/2
 * buffers in its arenas: at rest that is resident memory no connection uses. When a busy
 * sample is followed by `QUIET_BEFORE_RECLAIM_MS` of quiet ones, one full collection and
 * a `malloc_trim` return it (Envoy's overload manager does the same with its
 * `shrink_heap` action). Nothing runs while traffic flows, nor again on a process that
 * stayed idle. Start-up counts as work: loading config and issuing the pods' certificates
 * leaves garbage too (with 100 pods the old generation held 28 MB for 19 MB live until
 * the first reclaim).
 */
export class IdleReclaim {
  readonly #utilization: () => number;
  readonly #collect: (() => void) | undefined;
  readonly #scavenge: (() => void) | undefined;
  readonly #trim: () => void;
  readonly #rss: () => number;
  readonly #now: () => number;
  readonly #timer: NodeJS.Timeout | undefined;
  readonly #reclaims: Counter;
  readonly #freed: Counter;
  readonly #pause: Gauge;
  /** Work happened since the last reclaim (start-up is work). */
  #busy = true;
  #notBefore = 0;
  /** When the current quiet began (its young collection); undefined while not quiet. */
  #quietSince: number | undefined;

  constructor(inputs: IdleReclaimInputs) {
    this.#utilization = inputs.utilization ?? utilizationProbe();
    this.#collect = 'collect' in inputs ? inputs.collect : compactingGc();
    this.#scavenge = 'scavenge' in inputs ? inputs.scavenge : youngGc();
    this.#trim = inputs.trim ?? mallocTrim;
    this.#rss = inputs.rss ?? (() => process.memoryUsage.rss());
    this.#now = inputs.now ?? (() => performance.now());
    const registers = [inputs.registry];
    this.#reclaims = new Counter({
      name: 'zmesh_memory_reclaims_total',
      help: 'Times the proxy collected garbage and trimmed malloc after traffic went quiet',
      registers,
    });
    this.#freed = new Counter({
      name: 'zmesh_memory_reclaimed_bytes_total',
      help: 'Resident bytes those reclaims gave back to the kernel',
      registers,
    });
    this.#pause = new Gauge({
      name: 'zmesh_memory_reclaim_pause_seconds',
      help: 'How long the last reclaim held the event loop',
      registers,
    });
    if (inputs.sampleMs !== 0) {
      this.#timer = guardedInterval(
        'idle_reclaim',
        () => this.sample(),
        inputs.sampleMs ?? RECLAIM_SAMPLE_MS,
      );
      this.#timer.unref();
    }
  }

  /**
   * One sample: marks the process busy, or, once a busy process is quiet, runs a young
   * collection (the first starts the quiet) and reclaims when the quiet has lasted long enough. A quiet
   * starts below `QUIET_UTILIZATION` and lasts until a busy sample: a scrape of /metrics,
   * or timers slowed by a loaded CPU, may lift a sample between the two thresholds.
   */
  sample(): void {
    const u = this.#utilization();
    if (u >= BUSY_UTILIZATION) {
      this.#busy = true;
      this.#quietSince = undefined;
      return;
    }
    if (!this.#busy) return;
    const now = this.#now();
    if (this.#quietSince === undefined) {
      if (u >= QUIET_UTILIZATION) return;
      this.#quietSince = now;
      this.#youngCollection();
    } else if (now - this.#quietSince >= QUIET_BEFORE_RECLAIM_MS && now >= this.#notBefore) {
      this.reclaim();
    } else {
      this.#youngCollection();
    }
  }

  /** A young collection; like the reclaim's pause, its own time is not work for the next sample. */
  #youngCollection(): void {
    if (!this.#scavenge) return;
    this.#scavenge();
    this.#utilization();
  }

  reclaim(): void {
    const before = this.#rss();
    const started = this.#now();
    this.#collect?.();
    this.#trim();
    const pauseMs = this.#now() - started;
    const freed = Math.max(0, before - this.#rss());
    // The reclaim's own pause is not work: the next sample's utilisation starts after it.
    // Counted, a 200 ms pause read as 10% and set off another reclaim one gap later.
    this.#utilization();
    this.#busy = false;
    this.#quietSince = undefined;
    this.#notBefore = this.#now() + Math.max(MIN_GAP_MS, pauseMs / MAX_PAUSE_SHARE);
    this.#reclaims.inc();
    this.#freed.inc(freed);
    this.#pause.set(pauseMs / 1000);
    log.debug({ freedMb: Math.round(freed / 1e5) / 10, pauseMs: Math.round(pauseMs) }, 'memory reclaimed');
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

/**
 * `globalThis.gc`, present when node runs with `--expose-gc` (bin/zmesh passes it to
 * ztunnel), made to compact. A plain full collection frees objects but leaves most old
 * generation pages in place, each still holding a few live ones: after start-up with 100
 * pods, 28.5 MB of pages for 19 MB live, all resident. Compacting moves the survivors
 * together and releases the emptied pages (RSS 93 → 84 MB; the pause 20 → 37 ms, once).
 * V8 reads the flag at each full collection, so it is on for this one only. On Node 24
 * the emptied pages stay resident (only the memory-reducing `last-resort` collection
 * returns them): the open regression in docs/performance.md, "Node 20 vs Node 24".
 */
export function compactingGc(): (() => void) | undefined {
  const gc = exposedGc();
  if (gc === undefined) return undefined;
  return () => {
    setFlagsFromString('--compact-on-every-full-gc');
    try {
      gc();
    } finally {
      setFlagsFromString('--no-compact-on-every-full-gc');
    }
  };
}

/** A young-generation collection through `globalThis.gc` (`--expose-gc`), else none. */
export function youngGc(): (() => void) | undefined {
  const gc = exposedGc();
  if (gc === undefined) return undefined;
  return () => gc({ type: 'minor' });
}

type Gc = (options?: { type: 'minor' | 'major' }) => void;

function exposedGc(): Gc | undefined {
  const gc = (globalThis as { gc?: Gc }).gc;
  return typeof gc === 'function' ? gc : undefined;
}
