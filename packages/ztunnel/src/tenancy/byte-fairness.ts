import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import {
  bulkCoalescer,
  guardedInterval,
  isResettableStream,
  PUMP_QUEUE_BYTES,
  utilizationProbe,
} from '@zmesh/shared';
import { Registry } from 'prom-client';
import type { MemoryGuard } from './memory-guard.js';
import { cleanlyEnded, teardown } from './pair-end.js';
import { ByteFairnessMetrics } from './tenancy-metrics.js';

/** Event-loop lag that starts penalising the heaviest tenant; well under a victim's p99. */
export const DEFAULT_LAG_THRESHOLD_MS = 10;
/**
 * Event-loop utilisation over a tick above which the loop counts as saturated even when
 * each turn is short (many readable sockets, none slow): that also penalises the heaviest.
 */
const DEFAULT_BUSY_UTILIZATION = 0.9;
/** How long one lag penalty pauses a tenant's reads; bounded so no tenant is stalled for long. */
export const DEFAULT_PAUSE_MS = 50;
export const MAX_PAUSE_MS = 250;
/**
 * Period of the lag probe, window decay and penalty expiry. The timer runs only while some
 * link moved bytes within the window or a penalty is pending: an idle ztunnel woke 100
 * times a second for nothing, 1.3% event-loop utilisation with 100 pods, which also kept
 * `IdleReclaim` from ever seeing the process quiet.
 */
export const DEFAULT_TICK_MS = 10;
/** Time constant of the decaying per-tenant byte window that ranks consumers. */
export const DEFAULT_WINDOW_MS = 1000;
/** 256 KiB in the decayed window: a bulk stream, not a request/response exchange. */
const DEFAULT_HEAVY_LINK_BYTES = 256 * 1024;
/** Bytes written for a tenant but not yet flushed, across all its pairs, before its reads pause. */
export const DEFAULT_MAX_BUFFERED_PER_TENANT = 4 * 1024 * 1024;
/**
 * Bulk links of one tenant that copy at the same time while another tenant is active too;
 * its other bulk links wait their turn (rotated every tick). Each readable link costs the
 * event loop up to a few hundred KiB of copying per turn, so this bounds how long one
 * tenant can make every loop turn. One, not two: against a 32-stream flood the victim's
 * p99 was 3.66x solo with two (median of 4 rounds; 1.74-5.33x) and 1.63x with one
 * (1.11-1.67x). A tenant alone on the loop copies all its links: nobody waits for it.
 * Only links reading a socket take turns (see `Link.parkable`): parked HTTP/2 streams held
 * every byte of the flood for a whole rotation, long enough to be promoted, and its
 * ArrayBuffers then grew by 15-30 MB a second until a full collection paused ztunnel for
 * 7-17 ms every 3-4 s. Flood, 3 rounds: victim p99 1.00x solo (0.93-1.44x) with only
 * sockets parked, against 1.57-2.0x with streams parked too.
 */
const DEFAULT_BULK_SLOTS_PER_TENANT = 1;
/**
 * Writes smaller than this (a redis command, an RPC ack) are counted but not tracked until
 * flushed: a write callback on every small message cost 5–15% of request rate, and the
 * link's queue bound still caps what they can hold.
 */
const UNTRACKED_WRITE_BYTES = 512;
/**
 * What a bulk link lets queue in its destination while the loop is shared (instead of
 * PUMP_QUEUE_BYTES): a tenant's own requests wait behind its bulk bytes on a shared HBONE
 * session, and those bytes drain at only its share of the loop. Flood, 9 rounds each:
 * victim p99 0.89-2.90x solo (median round 1.56x) with 64 KiB, 1.38-2.75x (1.94x) with
 * 256 KiB; slow readers 0.68x against 0.92x.
 */
const SHARED_BULK_QUEUE_BYTES = 64 * 1024;

export interface ByteFairnessOptions {
  readonly lagThresholdMs?: number;
  readonly pauseMs?: number;
  readonly tickMs?: number;
  readonly windowMs?: number;
  readonly maxBufferedPerTenant?: number;
  /**
   * A penalised tenant's links are paused only when they moved at least this many bytes in
   * the recent window: its bulk streams slow down, its request/response traffic does not.
   */
  readonly heavyLinkBytes?: number;
  /** Bulk (heavy) links per tenant copying at once; the rest take turns, one tick each. */
  readonly bulkSlots?: number;
  /** Bytes a link lets queue in its destination before its source pauses (as `pumpBytes`). */
  readonly queueBytes?: number;
  /** The same for a bulk link while another tenant is active too. */
  readonly sharedQueueBytes?: number;
  readonly busyUtilization?: number;
  /**
   * `--workers N`: the node's contention, which every worker publishes to and reads
   * (shared-quotas.ts). The decisions that weigh tenants against each other (whether the
   * loop is shared, so bulk links take turns and queue less; whether a lag pause is due and
   * whom it slows) then use the node's view: a tenant alone on its worker is still slowed
   * for a tenant on another, as it would be on one loop.
   */
  readonly node?: NodeContention;
  /** Current event loop lag in ms; the default is how late this tick's own timer fired. */
  readonly lag?: () => number;
  /** Event-loop utilisation (0–1) since the last tick; the default reads `performance.eventLoopUtilization`. */
  readonly utilization?: () => number;
  /** Milliseconds, monotonic. */
  readonly now?: () => number;
  /** When false, nothing runs on its own: the caller (a test) calls `tick()`. Default true. */
  readonly autoTick?: boolean;
  /** Node-wide accounting: buffered bytes are reported to it and its shed candidate is paused too. */
  readonly memory?: MemoryGuard;
  readonly registry?: Registry;
}

/** The node-wide view `ByteFairness` reads with `--workers N` (docs/tenancy.md, "Workers"). */
export interface NodeContention {
  /** This worker's tick: its loop under pressure or not, and the bytes each active tenant moved here since its last tick. */
  publish(pressured: boolean, moved: ReadonlyMap<string, number>): void;
  /** Whether some worker's loop was under pressure lately. */
  pressured(): boolean;
  /** Tenants moving bytes on any worker lately, and the sum of their node-wide byte windows. */
  windows(): { active: number; total: number };
  /** A tenant's byte window over every worker; undefined when the node does not count it (then this worker's own is used). */
  windowOf(tenant: string): number | undefined;
}

export interface TenantByteStats {
  /** Bytes copied in both directions since the tenant's first attach. */
  bytes: number;
  /** Times the tenant's reads were paused by fairness (lag, memory pressure or its buffer cap). */
  paused: number;
  /** Bytes written but not yet flushed. */
  buffered: number;
  /** Decaying byte count ranking the tenant against others. */
  windowBytes: number;
  /** Copy directions attached (two per connection). */
  links: number;
}

/** One copy direction, src → dst. */
interface Link {
  readonly src: Duplex;
  readonly dst: Duplex;
  readonly tenant: TenantState;
  /** dst.write returned false; waiting for 'drain' (ordinary stream back-pressure). */
  destFull: boolean;
  /** Whether we paused src; invariant: mirrors the last decision of `#flow`. */
  paused: boolean;
  /** Bytes of this link written to dst and not yet flushed; returned to the tenant on detach. */
  buffered: number;
  /** Waiting for its tenant's turn among its bulk links (see `bulkSlots`). */
  parked: boolean;
  /**
   * Whether bulk turns may park it: only when its source is a socket, whose unread bytes
   * wait in the kernel. An HTTP/2 stream's bytes were already read, decrypted and handed
   * over by the session, so parking one saves no work and only holds them in the heap.
   */
  readonly parkable: boolean;
  /** Bytes this link moved since the last tick, and their decayed sum over the window. */
  recent: number;
  windowBytes: number;
  detached: boolean;
  /** Removes this link's listeners. */
  off: () => void;
}

interface TenantState {
  readonly name: string;
  readonly links: Set<Link>;
  /**
   * Links that moved bytes within the window: the only ones a tick looks at, so thousands
   * of idle connections (a hoard) cost the timer nothing.
   */
  readonly active: Set<Link>;
  bytes: number;
  recent: number;
  windowBytes: number;
  buffered: number;
  /** Reads paused until the tenant's buffered bytes fall to half the cap (hysteresis). */
  capped: boolean;
  penaltyUntil: number;
  /** Rotation offset over the tenant's bulk links. */
  turn: number;
  /** After a lag penalty the tenant reads freely for as long again: lag pauses it at most half the time. */
  cooldownUntil: number;
  pauses: number;
}

/**
 * Copies bytes between the two sockets of each tenant's connections and keeps the copy
 * loop fair (docs/design.md §7): a tenant's buffered bytes are capped (reads pause instead of
 * buffering without bound), and while the event loop lags the heaviest recent consumer's
 * reads are paused for a short bounded time (then left alone as long), so light tenants'
 * bytes get the loop first. Under node memory pressure the guard's shed candidate is
 * paused for as long as it stays the candidate.
 */
export class ByteFairness {
  readonly #o: Required<Omit<ByteFairnessOptions, 'memory' | 'registry' | 'autoTick' | 'node'>>;
  readonly #memory: MemoryGuard | undefined;
  readonly #node: NodeContention | undefined;
  readonly #metrics: ByteFairnessMetrics;
  readonly #tenants = new Map<string, TenantState>();
  readonly #autoTick: boolean;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  #lastTick: number;
  /** When the running timer's next tick is due: the default lag is how late it fires. */
  #due: number;
  /** Whether the last tick found the loop under pressure (lag or utilisation). */
  pressured = false;
  /** Tenants that moved bytes lately, as of the last tick. */
  activeTenants = 0;

  constructor(options: ByteFairnessOptions = {}) {
    const tickMs = options.tickMs ?? DEFAULT_TICK_MS;
    this.#o = {
      lagThresholdMs: options.lagThresholdMs ?? DEFAULT_LAG_THRESHOLD_MS,
      pauseMs: Math.min(MAX_PAUSE_MS, options.pauseMs ?? DEFAULT_PAUSE_MS),
      tickMs,
      busyUtilization: options.busyUtilization ?? DEFAULT_BUSY_UTILIZATION,
      windowMs: options.windowMs ?? DEFAULT_WINDOW_MS,
      maxBufferedPerTenant: options.maxBufferedPerTenant ?? DEFAULT_MAX_BUFFERED_PER_TENANT,
      heavyLinkBytes: options.heavyLinkBytes ?? DEFAULT_HEAVY_LINK_BYTES,
      bulkSlots: Math.max(1, options.bulkSlots ?? DEFAULT_BULK_SLOTS_PER_TENANT),
      queueBytes: options.queueBytes ?? PUMP_QUEUE_BYTES,
      sharedQueueBytes: options.sharedQueueBytes ?? SHARED_BULK_QUEUE_BYTES,
      lag: options.lag ?? (() => Math.max(0, this.#o.now() - this.#due)),
      // An injected lag (a test) with no utilisation means the test drives pressure by lag alone.
      utilization: options.utilization ?? (options.lag ? () => 0 : utilizationProbe()),
      now: options.now ?? (() => performance.now()),
    };
    this.#memory = options.memory;
    this.#node = options.node;
    this.#metrics = new ByteFairnessMetrics(options.registry ?? new Registry());
    this.#lastTick = this.#o.now();
    this.#due = this.#lastTick + tickMs;
    this.#autoTick = options.autoTick !== false;
  }

  /** Whether the timer runs: only while links move bytes or a penalty is pending. */
  get ticking(): boolean {
    return this.#timer !== undefined;
  }

  /**
   * Copies a → b and b → a for `tenant` until either side closes (then the other is
   * destroyed too) or the returned function is called. Detaching stops copying and returns
   * the pair's buffered bytes to the accounting; it leaves both streams paused, neither
   * ended nor destroyed. A tenant with no pair attached leaves `stats()`.
   */
  attach(tenant: string, a: Duplex, b: Duplex): () => void {
    const state = this.#tenant(tenant);
    const links = [this.#link(state, a, b), this.#link(state, b, a)];
    const onError = () => {
      teardown(a, true);
      teardown(b, true);
    };
    // A side that closed without ending both ways cleanly (a reset socket, a reset stream)
    // resets the other: an HTTP/2 stream only destroyed would send RST_STREAM(NO_ERROR),
    // and the peer keeps such a stream until its reader takes the end, which a paused
    // reader never does (slow readers' tunnels stayed open at the destination).
    const onCloseA = () => {
      teardown(b, !cleanlyEnded(a));
      a.destroy();
      detach();
    };
    const onCloseB = () => {
      teardown(a, !cleanlyEnded(b));
      b.destroy();
      detach();
    };
    const detach = () => {
      for (const s of [a, b]) s.off('error', onError);
      a.off('close', onCloseA);
      b.off('close', onCloseB);
      for (const link of links) this.#unlink(link);
      if (state.links.size === 0 && state.buffered === 0) this.#tenants.delete(tenant);
    };
    for (const s of [a, b]) s.on('error', onError);
    a.on('close', onCloseA);
    b.on('close', onCloseB);
    return detach;
  }

  stats(): Record<string, TenantByteStats> {
    const out: Record<string, TenantByteStats> = {};
    for (const [name, t] of this.#tenants) {
      out[name] = {
        bytes: t.bytes,
        paused: t.pauses,
        buffered: t.buffered,
        windowBytes: t.windowBytes + t.recent,
        links: t.links.size,
      };
    }
    return out;
  }

  /** Ages the byte windows, ends expired penalties and, if the loop lags, pauses the heaviest tenant. */
  tick(): void {
    const now = this.#o.now();
    const lag = this.#o.lag();
    const busy = this.#o.utilization();
    const decay = Math.exp(-Math.max(0, now - this.#lastTick) / this.#o.windowMs);
    this.#lastTick = now;
    this.#due = now + this.#o.tickMs;
    this.#metrics.lag.set(lag / 1000);
    this.pressured = lag > this.#o.lagThresholdMs || busy > this.#o.busyUtilization;
    let activeTenants = 0;
    for (const t of this.#tenants.values()) if (t.active.size > 0) activeTenants++;
    // With workers, the loop is shared when the node is: other tenants' bytes on other
    // workers take the same cores (and on the harness's one pinned CPU, the same core).
    const node = this.#node ? this.#nodeView() : undefined;
    this.activeTenants = Math.max(activeTenants, node?.active ?? 0);
    const shared = this.activeTenants > 1;
    let pending = false;
    for (const t of this.#tenants.values()) {
      t.windowBytes = t.windowBytes * decay + t.recent;
      t.recent = 0;
      for (const link of t.active) {
        link.windowBytes = link.windowBytes * decay + link.recent;
        link.recent = 0;
        if (link.windowBytes < 1) {
          link.windowBytes = 0;
          link.parked = false;
          t.active.delete(link);
          this.#flow(link);
        }
      }
      if (t.penaltyUntil !== 0 && now >= t.penaltyUntil) {
        t.penaltyUntil = 0;
        t.cooldownUntil = now + this.#o.pauseMs;
      }
      this.#rotate(t, shared);
      if (t.active.size > 0 || t.penaltyUntil !== 0) pending = true;
    }
    if (this.pressured || this.#node?.pressured()) this.#penalize(this.#heaviest(now, node), now, 'lag');
    const shed = this.#memory?.shedCandidate();
    if (shed !== undefined) this.#penalize(this.#tenants.get(shed), now, 'memory');
    // A penalty set just now ends on a later tick too (the memory shed candidate may have
    // no link that moved bytes lately).
    if (!pending && !this.#penaltyPending()) this.#sleep();
  }

  /** Publishes this tick's pressure and bytes to the node and reads the node's byte windows back. */
  #nodeView(): { active: number; total: number } {
    const moved = new Map<string, number>();
    for (const [name, t] of this.#tenants) if (t.active.size > 0) moved.set(name, t.recent);
    this.#node!.publish(this.pressured, moved);
    return this.#node!.windows();
  }

  /** Stops the timer and the lag probe; attached pairs keep copying without fairness. */
  close(): void {
    this.#closed = true;
    this.#sleep();
  }

  /** The first bytes after a quiet spell start the timer; its lag counts from now. */
  #wake(): void {
    if (!this.#autoTick || this.#closed) return;
    this.#due = this.#o.now() + this.#o.tickMs;
    this.#timer = guardedInterval('byte_fairness_tick', () => this.tick(), this.#o.tickMs);
    this.#timer.unref();
  }

  #sleep(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.pressured = false;
    this.activeTenants = 0;
    this.#metrics.lag.set(0);
  }

  #penaltyPending(): boolean {
    for (const t of this.#tenants.values()) if (t.penaltyUntil !== 0) return true;
    return false;
  }

  #tenant(name: string): TenantState {
    let t = this.#tenants.get(name);
    if (!t) {
      t = {
        name,
        links: new Set(),
        active: new Set(),
        bytes: 0,
        recent: 0,
        windowBytes: 0,
        buffered: 0,
        capped: false,
        penaltyUntil: 0,
        turn: 0,
        cooldownUntil: 0,
        pauses: 0,
      };
      this.#tenants.set(name, t);
    }
    return t;
  }

  #link(tenant: TenantState, src: Duplex, dst: Duplex): Link {
    const link: Link = {
      src,
      dst,
      tenant,
      destFull: false,
      parked: false,
      parkable: !isResettableStream(src),
      paused: false,
      buffered: 0,
      recent: 0,
      windowBytes: 0,
      detached: false,
      off: () => {
        src.off('data', onData);
        src.off('end', onEnd);
        dst.off('drain', onDrain);
      },
    };
    const onDrain = () => {
      link.destFull = false;
      this.#flow(link);
    };
    // Bulk chunks are held (corked) until the check phase so that one socket read's worth
    // of HTTP/2 DATA frames leaves in one writev, as `pumpBytes` does on the plain path.
    const coalesce = bulkCoalescer(dst);
    const onData = (chunk: Buffer | string) => {
      const n = typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length;
      if (n < UNTRACKED_WRITE_BYTES) {
        this.#counted(link, n);
        dst.write(chunk);
      } else {
        this.#copied(link, n);
        coalesce(n);
        dst.write(chunk, () => this.#flushed(link, n));
      }
      // Above the bound a write has returned false, so 'drain' is due.
      const bound =
        this.activeTenants > 1 && this.#heavy(link) ? this.#o.sharedQueueBytes : this.#o.queueBytes;
      if (dst.writableLength > bound && !link.destFull) {
        link.destFull = true;
        dst.once('drain', onDrain);
      }
      this.#flow(link);
    };
    const onEnd = () => dst.end(); // half-close, as TCP FIN propagates
    src.on('data', onData);
    // A socket that got FIN with nothing buffered emits 'end' without a reader, so it may
    // have ended before we attached (a client that half-closes while its tunnel is set up).
    if (src.readableEnded) queueMicrotask(onEnd);
    else src.on('end', onEnd); // emitted once; on() keeps no once() wrapper per link
    tenant.links.add(link);
    this.#flow(link); // a new pair of a paused tenant starts paused
    // A 'data' listener does not undo an earlier explicit pause() (a stream held while
    // its tunnel was set up), so an open link resumes explicitly.
    if (!link.paused) src.resume();
    return link;
  }

  #unlink(link: Link): void {
    if (link.detached) return;
    link.detached = true;
    link.off();
    link.tenant.links.delete(link);
    link.tenant.active.delete(link);
    this.#release(link.tenant, link.buffered);
    link.buffered = 0;
    // Without our 'data' listener a flowing stream would drop bytes; the next owner resumes it.
    link.src.pause();
  }

  #counted(link: Link, n: number): void {
    if (this.#timer === undefined) this.#wake();
    const t = link.tenant;
    t.bytes += n;
    t.recent += n;
    link.recent += n;
    t.active.add(link);
  }

  #copied(link: Link, n: number): void {
    this.#counted(link, n);
    const t = link.tenant;
    t.buffered += n;
    link.buffered += n;
    this.#memory?.add(t.name, n);
    if (!t.capped && t.buffered >= this.#o.maxBufferedPerTenant) {
      t.capped = true;
      this.#paused(t, 'buffer');
      this.#flowAll(t);
    }
  }

  #flushed(link: Link, n: number): void {
    if (link.detached) return;
    link.buffered -= n;
    this.#release(link.tenant, n);
  }

  #release(t: TenantState, n: number): void {
    t.buffered -= n;
    this.#memory?.remove(t.name, n);
    if (t.capped && t.buffered <= this.#o.maxBufferedPerTenant / 2) {
      t.capped = false;
      this.#flowAll(t);
    }
  }

  /**
   * The tenant with the most bytes in the window, if it is above an equal share of the
   * window (a light tenant gains nothing from being paused) and not cooling down.
   */
  #heaviest(now: number, node?: { active: number; total: number }): TenantState | undefined {
    let top: TenantState | undefined;
    let topBytes = 0;
    let total = 0;
    let active = 0;
    for (const t of this.#tenants.values()) {
      // Only tenants whose links moved bytes lately share the loop: a tenant holding idle
      // connections (a hoard) kept a decaying window above zero for ever, and the lone
      // active tenant was paused for it every other 50 ms.
      if (t.active.size === 0) continue;
      total += t.windowBytes;
      active++;
      if (t.penaltyUntil !== 0 || now < t.cooldownUntil) continue;
      // With workers, tenants are ranked by their bytes on every worker, against the node's.
      const bytes = (node && this.#node?.windowOf(t.name)) ?? t.windowBytes;
      if (!top || bytes > topBytes) {
        top = t;
        topBytes = bytes;
      }
    }
    if (node && node.active >= active) {
      total = node.total;
      active = node.active;
    }
    // A lone tenant is never paused for lag: with nobody to yield to, a pause only adds
    // latency (a loaded machine lags whatever we do). Only a tenant above its equal share
    // of an actually shared loop is slowed.
    if (!top || active < 2 || topBytes <= total / active) return undefined;
    return top;
  }

  #penalize(t: TenantState | undefined, now: number, reason: 'lag' | 'memory'): void {
    if (t?.penaltyUntil !== 0 || t.links.size === 0) return;
    t.penaltyUntil = now + this.#o.pauseMs;
    this.#paused(t, reason);
    this.#flowActive(t);
  }

  #paused(t: TenantState, reason: 'lag' | 'memory' | 'buffer'): void {
    t.pauses++;
    this.#metrics.pauses.inc({ tenant: t.name, reason });
  }

  /**
   * Gives `bulkSlots` of the tenant's parkable bulk links that can make progress the next
   * turn and parks the others, while the loop is `shared` with another active tenant; a
   * link that moved less than `heavyLinkBytes` in the window (a request/response
   * exchange) is never parked.
   */
  #rotate(t: TenantState, shared: boolean): void {
    const ready: Link[] = [];
    for (const link of t.active) {
      if (link.parkable && this.#heavy(link) && !link.destFull) ready.push(link);
      else link.parked = false;
    }
    const slots = shared ? this.#o.bulkSlots : Number.POSITIVE_INFINITY;
    if (ready.length <= slots) {
      for (const link of ready) link.parked = false;
    } else {
      const first = t.turn % ready.length;
      for (let i = 0; i < ready.length; i++)
        ready[i]!.parked = (i - first + ready.length) % ready.length >= slots;
      t.turn = first + slots;
    }
    this.#flowActive(t);
  }

  #heavy(link: Link): boolean {
    return link.windowBytes + link.recent >= this.#o.heavyLinkBytes;
  }

  #flowAll(t: TenantState): void {
    for (const link of t.links) this.#flow(link);
  }

  /** Lag penalties and bulk turns only concern links that moved bytes lately. */
  #flowActive(t: TenantState): void {
    for (const link of t.active) this.#flow(link);
  }

  /** Applies the one rule deciding whether src may be read: every reason to stop is checked together. */
  #flow(link: Link): void {
    const t = link.tenant;
    // Over its buffer cap, a tenant's links that hold unflushed bytes wait; a link with
    // nothing in flight (a request/response exchange) may go on. Under a penalty only the
    // tenant's heavy links wait. Each link is still bounded by its own back-pressure.
    const open =
      !link.destFull &&
      !link.parked &&
      !(t.capped && link.buffered > 0) &&
      !(t.penaltyUntil !== 0 && this.#heavy(link));
    if (open && link.paused) {
      link.paused = false;
      link.src.resume();
    } else if (!open && !link.paused) {
      link.paused = true;
      link.src.pause();
    }
  }
}
