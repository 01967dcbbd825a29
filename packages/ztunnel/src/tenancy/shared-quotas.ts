/**
 * Node-wide tenant counters in a `SharedArrayBuffer` (docs/tenancy.md, "Workers"): with
 * `--workers N` every worker thread maps the same buffer, so a tenant whose pods sit on
 * different workers draws on one connection count, one pending-connect count and one connect
 * token bucket, not N. Each tenant has a slot; a slot's fields change only under the slot's
 * spin lock (`Atomics.compareExchange`), held for a few arithmetic operations, never across
 * an await. Two counts belong to no tenant: unauthenticated HBONE connections
 * (`--max-preauth`), one cell, and bytes buffered (the memory guard's node-wide cap), the sum
 * of what each worker publishes. Each worker keeps a ledger of what it holds of every count,
 * so the main thread can give back a dead worker's share.
 */

import type { SharedCount } from '@zmesh/shared';
import type { NodeContention } from './byte-fairness.js';
import type { SharedTotal } from './memory-guard.js';

/** Tenants a node can count node-wide; more fall back to per-worker counting (logged once). */
const SHARED_QUOTA_SLOTS = 1024;
/** Int32 fields per slot: lock, key (two hashes), connections, pending; padded to 8. */
const I32_PER_SLOT = 8;
/**
 * Float64 fields per slot: tokens, refilledAt (ms, epoch-based so every thread agrees), the
 * decayed connect-attempt count and when it was last counted, when a worker last saw the
 * tenant move bytes, and the tenant's decayed byte window over every worker and when it was
 * last added to (the node-wide contention signal, docs/tenancy.md "Workers").
 */
const F64_PER_SLOT = 7;
const LOCK = 0;
const KEY_A = 1;
const KEY_B = 2;
const CONNECTIONS = 3;
const PENDING = 4;
const TOKENS = 0;
const REFILLED_AT = 1;
const ATTEMPTS = 2;
const ATTEMPTS_AT = 3;
const BYTES_AT = 4;
const WINDOW = 5;
const WINDOW_AT = 6;
/** As ByteFairness's DEFAULT_WINDOW_MS: the time constant of a tenant's decayed byte window. */
const BYTE_WINDOW_MS = 1000;
/** As AttemptRates: a quarter-second window, in events per second. */
const ATTEMPT_WINDOW_MS = 250;
/** A tenant or a worker's pressure counts for this long after a worker last reported it (5 ticks). */
const SIGNAL_WINDOW_MS = 50;

/** Bytes of one tenant slot in the table. */
const SLOT_BYTES = I32_PER_SLOT * 4 + F64_PER_SLOT * 8;
/** Workers the buffer keeps a ledger for (`--workers` takes at most 16). */
const MAX_WORKERS = 16;
/**
 * Node-wide counts that belong to no tenant, after the table, each taken under a limit with
 * a compare-and-swap: HBONE connections not yet authenticated (`--max-preauth`'s total).
 */
const NODE_COUNTERS = ['preauth'] as const;
export type NodeCounterName = (typeof NODE_COUNTERS)[number];
/**
 * Int32 cells of one worker's ledger: its share of each slot's connections and pending, of
 * each node counter, and last the bytes it buffers now. Those change on every chunk copied,
 * so each worker writes only its own cell (no cache line bounces between cores on the data
 * path) and the node's figure is the sum over the ledgers, read when a decision needs it.
 */
const ledgerCells = (slots: number) => slots * 2 + NODE_COUNTERS.length + 1;
const bufferedCell = (slots: number) => slots * 2 + NODE_COUNTERS.length;

/**
 * Where each part lives: the tenant table; one Float64 for when a worker last found its loop
 * under pressure; the node counters (padded to 8 bytes); then one ledger per worker slot,
 * what that worker holds of every count, so a worker that dies can have it given back.
 */
function layout(slots: number) {
  const pressure = slots * SLOT_BYTES;
  const counters = pressure + 8;
  const ledgers = counters + Math.ceil((NODE_COUNTERS.length * 4) / 8) * 8;
  return { pressure, counters, ledgers, bytes: ledgers + MAX_WORKERS * ledgerCells(slots) * 4 };
}

function slotsOf(byteLength: number): number {
  const fixed = layout(0).bytes;
  return Math.floor((byteLength - fixed) / (layout(1).bytes - fixed));
}

/** The buffer every worker maps: made once by the main thread, passed in `workerData`. */
export function sharedQuotaBuffer(slots = SHARED_QUOTA_SLOTS): SharedArrayBuffer {
  return new SharedArrayBuffer(layout(slots).bytes);
}

/** A count every worker shares (`--max-preauth`'s total): the node-wide cell, with this worker's share kept in its ledger. */
export class NodeCounter implements SharedCount {
  readonly #node: Int32Array;
  readonly #at: number;
  readonly #ledger: Int32Array | undefined;
  readonly #mine: number;

  constructor(node: Int32Array, at: number, ledger: Int32Array | undefined, mine: number) {
    this.#node = node;
    this.#at = at;
    this.#ledger = ledger;
    this.#mine = mine;
  }

  load(): number {
    return Atomics.load(this.#node, this.#at);
  }

  tryAdd(n: number, limit: number): boolean {
    for (;;) {
      const held = Atomics.load(this.#node, this.#at);
      if (held + n > limit) return false;
      if (Atomics.compareExchange(this.#node, this.#at, held, held + n) === held) break;
    }
    if (this.#ledger) Atomics.add(this.#ledger, this.#mine, n);
    return true;
  }

  add(n: number): void {
    Atomics.add(this.#node, this.#at, n);
    if (this.#ledger) Atomics.add(this.#ledger, this.#mine, n);
  }

  sub(n: number): void {
    Atomics.sub(this.#node, this.#at, n);
    if (this.#ledger) Atomics.sub(this.#ledger, this.#mine, n);
  }
}

/** Milliseconds on a clock every thread of the process reads alike (performance.now() is per thread). */
export function sharedNow(): number {
  return performance.timeOrigin + performance.now();
}

export type SharedCounter = 'connections' | 'pending';

export class SharedQuotaTable {
  readonly #buffer: SharedArrayBuffer;
  readonly #i32: Int32Array;
  readonly #f64: Float64Array;
  readonly #pressure: Float64Array;
  readonly #counters: Int32Array;
  readonly #slots: number;
  /** This worker's ledger (absent on the main thread, which only reclaims). */
  readonly #ledger: Int32Array | undefined;
  readonly #cache = new Map<string, number>();

  /** `worker`: the worker slot this table counts for (its ledger); the main thread passes none. */
  constructor(buffer: SharedArrayBuffer, worker?: number) {
    this.#buffer = buffer;
    this.#slots = slotsOf(buffer.byteLength);
    const at = layout(this.#slots);
    this.#i32 = new Int32Array(buffer, 0, this.#slots * I32_PER_SLOT);
    this.#f64 = new Float64Array(buffer, this.#slots * I32_PER_SLOT * 4, this.#slots * F64_PER_SLOT);
    this.#pressure = new Float64Array(buffer, at.pressure, 1);
    this.#counters = new Int32Array(buffer, at.counters, NODE_COUNTERS.length);
    if (worker !== undefined) {
      if (!(Number.isInteger(worker) && worker >= 0 && worker < MAX_WORKERS))
        throw new RangeError(`worker ${worker}: want 0..${MAX_WORKERS - 1}`);
      this.#ledger = this.#ledgerOf(worker);
    }
  }

  /** The node's buffered bytes: this worker publishes its own, the total sums every worker's. */
  buffered(): SharedTotal {
    const at = bufferedCell(this.#slots);
    const ledgers = Array.from({ length: MAX_WORKERS }, (_, w) => this.#ledgerOf(w));
    const mine = this.#ledger;
    return {
      publish: (bytes) => {
        if (mine) Atomics.store(mine, at, bytes);
      },
      total: () => {
        let sum = 0;
        for (const ledger of ledgers) sum += Atomics.load(ledger, at);
        return sum;
      },
    };
  }

  /** A node-wide count that belongs to no tenant. */
  counter(name: NodeCounterName): NodeCounter {
    const i = NODE_COUNTERS.indexOf(name);
    return new NodeCounter(this.#counters, i, this.#ledger, this.#slots * 2 + i);
  }

  /**
   * Gives back everything a dead worker held (its connections, pending connects, buffered
   * bytes, unauthenticated connections) and clears its ledger: the thread is gone, so its
   * releases will never come. Called by the main thread before the slot is started again.
   * Returns how many units went back.
   */
  reclaim(worker: number): number {
    const ledger = this.#ledgerOf(worker);
    let returned = 0;
    for (let cell = 0; cell < ledger.length; cell++) {
      const held = Atomics.exchange(ledger, cell, 0);
      if (held === 0) continue;
      returned += held;
      if (cell < this.#slots * 2) {
        const slot = cell >> 1;
        Atomics.sub(this.#i32, slot * I32_PER_SLOT + (cell & 1 ? PENDING : CONNECTIONS), held);
      } else if (cell < bufferedCell(this.#slots)) Atomics.sub(this.#counters, cell - this.#slots * 2, held);
      // The buffered-bytes cell is the worker's own figure: cleared, it no longer adds to the sum.
    }
    return returned;
  }

  #ledgerOf(worker: number): Int32Array {
    const cells = ledgerCells(this.#slots);
    return new Int32Array(this.#buffer, layout(this.#slots).ledgers + worker * cells * 4, cells);
  }

  /**
   * Counts a connect attempt of the slot's tenant: its rate (per second, decayed over a
   * quarter second) and the fastest other tenant's, node-wide.
   */
  recordAttempt(slot: number, now: number): { rate: number; fastestOther: number } {
    let count = 0;
    this.#locked(slot, () => {
      const f = slot * F64_PER_SLOT;
      const decayed =
        this.#f64[f + ATTEMPTS]! *
        Math.exp(-Math.max(0, now - this.#f64[f + ATTEMPTS_AT]!) / ATTEMPT_WINDOW_MS);
      count = decayed + 1;
      this.#f64[f + ATTEMPTS] = count;
      this.#f64[f + ATTEMPTS_AT] = now;
    });
    let fastestOther = 0;
    for (let other = 0; other < this.#slots; other++) {
      if (other === slot || this.#i32[other * I32_PER_SLOT + KEY_A] === 0) continue;
      const f = other * F64_PER_SLOT;
      const decayed =
        this.#f64[f + ATTEMPTS]! *
        Math.exp(-Math.max(0, now - this.#f64[f + ATTEMPTS_AT]!) / ATTEMPT_WINDOW_MS);
      if (decayed > fastestOther) fastestOther = decayed;
    }
    const perSecond = 1000 / ATTEMPT_WINDOW_MS;
    return { rate: count * perSecond, fastestOther: fastestOther * perSecond };
  }

  /** Tenants some worker saw moving bytes within the last SIGNAL_WINDOW_MS. */
  activeTenants(now: number): number {
    let n = 0;
    for (let slot = 0; slot < this.#slots; slot++)
      if (now - this.#f64[slot * F64_PER_SLOT + BYTES_AT]! <= SIGNAL_WINDOW_MS) n++;
    return n;
  }

  /**
   * A worker's tick: the slot's tenant moved `bytes` there since the worker's last tick. Added
   * to the tenant's node-wide window (decayed over BYTE_WINDOW_MS, as each worker's own), and
   * the tenant counts as moving bytes now.
   */
  addBytes(slot: number, bytes: number, now: number): void {
    this.#locked(slot, () => {
      const f = slot * F64_PER_SLOT;
      this.#f64[f + WINDOW] = this.#decayedWindow(f, now) + bytes;
      this.#f64[f + WINDOW_AT] = Math.max(now, this.#f64[f + WINDOW_AT]!);
      this.#f64[f + BYTES_AT] = now;
    });
  }

  /** The slot's tenant's byte window over every worker. */
  windowOf(slot: number, now: number): number {
    return this.#decayedWindow(slot * F64_PER_SLOT, now);
  }

  /**
   * The node's byte windows: how many tenants moved bytes on some worker within the last
   * SIGNAL_WINDOW_MS and the sum of their windows (what an equal share divides).
   */
  byteWindows(now: number): { active: number; total: number } {
    let active = 0;
    let total = 0;
    for (let slot = 0; slot < this.#slots; slot++) {
      const f = slot * F64_PER_SLOT;
      if (now - this.#f64[f + BYTES_AT]! > SIGNAL_WINDOW_MS) continue;
      active++;
      total += this.#decayedWindow(f, now);
    }
    return { active, total };
  }

  #decayedWindow(f: number, now: number): number {
    return this.#f64[f + WINDOW]! * Math.exp(-Math.max(0, now - this.#f64[f + WINDOW_AT]!) / BYTE_WINDOW_MS);
  }

  /** A worker found its event loop under pressure now. */
  markPressure(now: number): void {
    this.#pressure[0] = now;
  }

  /** Whether any worker found its loop under pressure within the last SIGNAL_WINDOW_MS. */
  pressured(now: number): boolean {
    return now - this.#pressure[0]! <= SIGNAL_WINDOW_MS;
  }

  /**
   * The tenant's slot, claimed on first use (a new bucket starts full at `burst`), or -1 when
   * the table is full. Two tenants share a slot only if both 32-bit hashes collide.
   */
  slotOf(tenant: string, burst: number, now: number): number {
    const cached = this.#cache.get(tenant);
    if (cached !== undefined) return cached;
    const a = hash(tenant, 0x811c9dc5) | 1;
    const b = hash(tenant, 0x01000193);
    for (let probe = 0; probe < this.#slots; probe++) {
      const slot = ((a >>> 0) + probe) % this.#slots;
      const base = slot * I32_PER_SLOT;
      let found = false;
      this.#locked(slot, () => {
        const key = this.#i32[base + KEY_A]!;
        if (key === 0) {
          this.#i32[base + KEY_A] = a;
          this.#i32[base + KEY_B] = b;
          this.#f64[slot * F64_PER_SLOT + TOKENS] = burst;
          this.#f64[slot * F64_PER_SLOT + REFILLED_AT] = now;
          found = true;
        } else found = key === a && this.#i32[base + KEY_B] === b;
      });
      if (found) {
        this.#cache.set(tenant, slot);
        return slot;
      }
    }
    return -1;
  }

  /** Adds one to the counter when it is under `limit`; false (unchanged) when it is not. */
  tryIncrement(slot: number, counter: SharedCounter, limit: number): boolean {
    const at = slot * I32_PER_SLOT + (counter === 'connections' ? CONNECTIONS : PENDING);
    for (;;) {
      const held = Atomics.load(this.#i32, at);
      if (held >= limit) return false;
      if (Atomics.compareExchange(this.#i32, at, held, held + 1) === held) break;
    }
    if (this.#ledger) Atomics.add(this.#ledger, slot * 2 + (counter === 'connections' ? 0 : 1), 1);
    return true;
  }

  decrement(slot: number, counter: SharedCounter): void {
    const at = slot * I32_PER_SLOT + (counter === 'connections' ? CONNECTIONS : PENDING);
    for (;;) {
      const held = Atomics.load(this.#i32, at);
      if (held <= 0) return;
      if (Atomics.compareExchange(this.#i32, at, held, held - 1) === held) break;
    }
    if (this.#ledger) Atomics.sub(this.#ledger, slot * 2 + (counter === 'connections' ? 0 : 1), 1);
  }

  /** Refills the bucket to `now` and takes a token: the tokens left, or -1 when it was empty. */
  takeToken(slot: number, rate: number, burst: number, now: number): number {
    let left = -1;
    this.#locked(slot, () => {
      const t = slot * F64_PER_SLOT;
      const elapsed = Math.max(0, now - this.#f64[t + REFILLED_AT]!) / 1000;
      const earned = rate === Number.POSITIVE_INFINITY ? burst : elapsed * rate;
      const tokens = Math.min(burst, this.#f64[t + TOKENS]! + earned);
      this.#f64[t + REFILLED_AT] = Math.max(now, this.#f64[t + REFILLED_AT]!);
      if (tokens >= 1) {
        left = tokens - 1;
        this.#f64[t + TOKENS] = left;
      } else this.#f64[t + TOKENS] = tokens;
    });
    return left;
  }

  usage(slot: number): { connections: number; pending: number; tokens: number } {
    const base = slot * I32_PER_SLOT;
    return {
      connections: Atomics.load(this.#i32, base + CONNECTIONS),
      pending: Atomics.load(this.#i32, base + PENDING),
      tokens: this.#f64[slot * F64_PER_SLOT + TOKENS]!,
    };
  }

  #locked(slot: number, fn: () => void): void {
    const at = slot * I32_PER_SLOT + LOCK;
    // A few arithmetic operations are held under it, never an await: spinning is cheaper than waiting.
    while (Atomics.compareExchange(this.#i32, at, 0, 1) !== 0) {}
    try {
      fn();
    } finally {
      Atomics.store(this.#i32, at, 0);
    }
  }
}

function hash(text: string, seed: number): number {
  let h = seed;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h | 0;
}

/**
 * Byte fairness's node-wide view over the workers' shared table (docs/tenancy.md, "Workers"):
 * each worker's pressure and its tenants' bytes go in at every tick; the node's pressure,
 * active tenants and byte windows come out. `burstOf` sizes a tenant's bucket when its slot is
 * claimed here first.
 */
export function nodeContention(
  shared: SharedQuotaTable,
  burstOf: (tenant: string) => number,
): NodeContention {
  const slotOf = (tenant: string, now: number) => shared.slotOf(tenant, burstOf(tenant), now);
  return {
    publish: (pressured, moved) => {
      const now = sharedNow();
      if (pressured) shared.markPressure(now);
      for (const [tenant, bytes] of moved) {
        const slot = slotOf(tenant, now);
        if (slot >= 0) shared.addBytes(slot, bytes, now);
      }
    },
    pressured: () => shared.pressured(sharedNow()),
    windows: () => shared.byteWindows(sharedNow()),
    windowOf: (tenant) => {
      const now = sharedNow();
      const slot = slotOf(tenant, now);
      return slot >= 0 ? shared.windowOf(slot, now) : undefined;
    },
  };
}
