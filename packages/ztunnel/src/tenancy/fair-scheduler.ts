import { ZmeshError } from '@zmesh/shared';
import { Registry } from 'prom-client';
import { LinkedQueue, type QueueNode } from './linked-queue.js';
import { SchedulerMetrics } from './tenancy-metrics.js';
import { CONTROL_TENANT } from './tenant-of.js';

/** Items running at once for all tenants together (the control lane has its own slots). */
export const DEFAULT_MAX_IN_FLIGHT = 64;
/** Items one tenant may have waiting; the next one is refused with ZM_ERR_TENANT_QUEUE_FULL. */
export const DEFAULT_MAX_QUEUED_PER_TENANT = 1024;
/**
 * Share of `maxInFlight` one tenant may hold at once: work that hangs (connects to a
 * black-holed address wait for their timeout) must not take every slot from the others.
 */
export const DEFAULT_TENANT_SHARE_OF_SLOTS = 0.75;
/** Cost credited to a tenant per round (times its weight); with cost 1 per item, round robin. */
export const DEFAULT_QUANTUM = 1;
/** Slots only the control lane may use, so xDS/CA/readiness work starts even when tenants saturate. */
export const DEFAULT_CONTROL_SLOTS = 4;

export type SchedulerMode = 'fair' | 'fifo';

export interface FairSchedulerOptions {
  /** Metric label telling this scheduler from the others sharing the registry. */
  readonly name?: string;
  /** `fifo` is one global queue in arrival order, kept so the harness can show the difference. */
  readonly mode?: SchedulerMode;
  readonly maxInFlight?: number;
  readonly maxQueuedPerTenant?: number;
  /** Default `ceil(maxInFlight × DEFAULT_TENANT_SHARE_OF_SLOTS)`; fair mode only. */
  readonly maxInFlightPerTenant?: number;
  readonly quantum?: number;
  readonly controlSlots?: number;
  /** Relative shares; a tenant not listed has weight 1. */
  readonly weights?: Readonly<Record<string, number>>;
  readonly registry?: Registry;
  /** Milliseconds, monotonic; injectable for tests. */
  readonly now?: () => number;
}

export interface ScheduleOptions {
  /** Aborting removes a still-queued item and rejects with the signal's reason; running work is not touched. */
  readonly signal?: AbortSignal;
}

interface Item extends QueueNode {
  readonly tenant: string;
  readonly cost: number;
  readonly work: () => unknown;
  readonly resolve: (value: unknown) => void;
  readonly reject: (reason: unknown) => void;
  readonly enqueuedAt: number;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/** Per-tenant DRR state. Invariant: in the ring iff `items.size > 0` (fair mode). */
interface Flow {
  readonly tenant: string;
  readonly items: LinkedQueue<Item>;
  /** Items of this tenant waiting, in either mode (the global FIFO holds them in fifo mode). */
  queued: number;
  deficit: number;
  /** Whether this turn's quantum has been credited; a turn spans pump calls while deficit lasts. */
  granted: boolean;
}

/**
 * Shares a bounded number of concurrent work slots between tenants by deficit round robin
 * (Shreedhar & Varghese, SIGCOMM '95): each round a backlogged tenant earns
 * `quantum × weight` and spends it on its queued items' costs, so a tenant with a long
 * backlog delays another tenant's item by at most about one quantum per other tenant.
 */
export class FairScheduler {
  readonly name: string;
  readonly mode: SchedulerMode;
  readonly #maxInFlight: number;
  readonly #maxQueued: number;
  readonly #maxPerTenant: number;
  readonly #quantum: number;
  readonly #controlSlots: number;
  readonly #weights = new Map<string, number>();
  readonly #now: () => number;
  readonly #metrics: SchedulerMetrics;
  readonly #flows = new Map<string, Flow>();
  /** Backlogged flows visited in order from `#cursor` (fair mode). */
  readonly #ring: Flow[] = [];
  #cursor = 0;
  readonly #fifo = new LinkedQueue<Item>();
  readonly #control = new LinkedQueue<Item>();
  #inFlight = 0;
  /** Running items per tenant; entries leave at zero. */
  readonly #running = new Map<string, number>();
  #controlInFlight = 0;
  #pumping = false;

  constructor(options: FairSchedulerOptions = {}) {
    this.name = options.name ?? 'default';
    this.mode = options.mode ?? 'fair';
    this.#maxInFlight = positive('maxInFlight', options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.#maxQueued = positive(
      'maxQueuedPerTenant',
      options.maxQueuedPerTenant ?? DEFAULT_MAX_QUEUED_PER_TENANT,
    );
    this.#maxPerTenant = positive(
      'maxInFlightPerTenant',
      options.maxInFlightPerTenant ?? Math.ceil(this.#maxInFlight * DEFAULT_TENANT_SHARE_OF_SLOTS),
    );
    this.#quantum = positive('quantum', options.quantum ?? DEFAULT_QUANTUM);
    this.#controlSlots = positive('controlSlots', options.controlSlots ?? DEFAULT_CONTROL_SLOTS);
    for (const [tenant, w] of Object.entries(options.weights ?? {})) this.setWeight(tenant, w);
    this.#now = options.now ?? (() => performance.now());
    this.#metrics = new SchedulerMetrics(options.registry ?? new Registry());
  }

  /** Changes a tenant's share from its next turn on; `undefined` restores weight 1. */
  setWeight(tenant: string, weight: number | undefined): void {
    if (weight === undefined) this.#weights.delete(tenant);
    else this.#weights.set(tenant, positive(`weight of ${tenant}`, weight));
  }

  /**
   * Runs `work` when `tenant`'s turn comes. `cost` is in the caller's unit (1 per item, or
   * bytes, or expected milliseconds); non-finite or negative costs count as 0. The
   * `CONTROL_TENANT` lane bypasses the tenants' queue and has its own reserved slots.
   * Rejects with ZM_ERR_TENANT_QUEUE_FULL when the tenant already has its bound queued.
   */
  schedule<T>(tenant: string, cost: number, work: () => Promise<T>, opts: ScheduleOptions = {}): Promise<T> {
    const labels = { scheduler: this.name, tenant };
    const { signal } = opts;
    if (signal?.aborted) {
      this.#metrics.refused.inc({ ...labels, reason: 'aborted' });
      return Promise.reject(signal.reason);
    }
    const queued = tenant === CONTROL_TENANT ? this.#control.size : (this.#flows.get(tenant)?.queued ?? 0);
    if (queued >= this.#maxQueued) {
      this.#metrics.refused.inc({ ...labels, reason: 'queue_full' });
      const error = new ZmeshError('ZM_ERR_TENANT_QUEUE_FULL', { ...labels, limit: this.#maxQueued });
      return Promise.reject(error);
    }
    return new Promise<T>((resolve, reject) => {
      const item: Item = {
        tenant,
        cost: Number.isFinite(cost) && cost > 0 ? cost : 0,
        work,
        resolve: resolve as (value: unknown) => void,
        reject,
        enqueuedAt: this.#now(),
        signal,
        onAbort: undefined,
        prev: undefined,
        next: undefined,
        queue: undefined,
      };
      if (signal) {
        item.onAbort = () => this.#abort(item);
        signal.addEventListener('abort', item.onAbort, { once: true });
      }
      this.#enqueue(item);
      this.#pump();
    });
  }

  /** Snapshot for admin pages and tests. */
  stats(): { inFlight: number; controlInFlight: number; queued: Record<string, number> } {
    const queued: Record<string, number> = {};
    for (const [tenant, flow] of this.#flows) queued[tenant] = flow.queued;
    if (this.#control.size > 0) queued[CONTROL_TENANT] = this.#control.size;
    return { inFlight: this.#inFlight, controlInFlight: this.#controlInFlight, queued };
  }

  #enqueue(item: Item): void {
    if (item.tenant === CONTROL_TENANT) {
      this.#control.push(item);
      this.#depth(item.tenant, this.#control.size);
      return;
    }
    let flow = this.#flows.get(item.tenant);
    if (!flow) {
      flow = { tenant: item.tenant, items: new LinkedQueue(), queued: 0, deficit: 0, granted: false };
      this.#flows.set(item.tenant, flow);
    }
    flow.queued++;
    this.#depth(item.tenant, flow.queued);
    if (this.mode === 'fifo') {
      this.#fifo.push(item);
      return;
    }
    if (flow.items.size === 0) this.#join(flow);
    flow.items.push(item);
  }

  /** A newly backlogged flow joins at the tail of the round, just before the cursor. */
  #join(flow: Flow): void {
    if (this.#ring.length === 0) {
      this.#ring.push(flow);
      this.#cursor = 0;
      return;
    }
    this.#ring.splice(this.#cursor, 0, flow);
    this.#cursor++;
  }

  /** Leaves the round; an idle flow keeps no credit (DRR resets the deficit of empty queues). */
  #leave(flow: Flow): void {
    const index = this.#ring.indexOf(flow);
    if (index >= 0) {
      this.#ring.splice(index, 1);
      if (index < this.#cursor) this.#cursor--;
      if (this.#cursor >= this.#ring.length) this.#cursor = 0;
    }
    flow.deficit = 0;
    flow.granted = false;
  }

  /** Bookkeeping after an item left its tenant's queue, by start or by abort. */
  #dequeued(item: Item): void {
    if (item.signal && item.onAbort) item.signal.removeEventListener('abort', item.onAbort);
    if (item.tenant === CONTROL_TENANT) {
      this.#depth(item.tenant, this.#control.size);
      return;
    }
    const flow = this.#flows.get(item.tenant)!;
    flow.queued--;
    this.#depth(item.tenant, flow.queued);
    if (flow.queued === 0) {
      this.#leave(flow);
      this.#flows.delete(item.tenant);
    }
  }

  #abort(item: Item): void {
    if (!item.queue?.remove(item)) return;
    this.#dequeued(item);
    this.#metrics.refused.inc({ scheduler: this.name, tenant: item.tenant, reason: 'aborted' });
    item.reject(item.signal?.reason);
  }

  #pump(): void {
    // work() may schedule more work synchronously; the running loop picks it up.
    if (this.#pumping) return;
    this.#pumping = true;
    try {
      while (this.#controlInFlight < this.#controlSlots && this.#control.size > 0) {
        this.#start(this.#control.shift()!, true);
      }
      while (this.#inFlight < this.#maxInFlight) {
        const item = this.mode === 'fifo' ? this.#fifo.shift() : this.#nextFair();
        if (!item) break;
        this.#start(item, false);
      }
    } finally {
      this.#pumping = false;
    }
  }

  /**
   * DRR: the flow under the cursor spends its credit on head items; when the head costs
   * more than is left, the turn passes on. A flow at its in-flight cap is passed over
   * without credit, as if it were not backlogged.
   */
  #nextFair(): Item | undefined {
    let visited = 0;
    let capped = 0;
    while (this.#ring.length > 0) {
      if (visited >= this.#ring.length) {
        if (capped === visited) return undefined;
        this.#fastForward();
        visited = capped = 0;
      }
      const flow = this.#ring[this.#cursor]!;
      const atCap = (this.#running.get(flow.tenant) ?? 0) >= this.#maxPerTenant;
      if (!atCap && !flow.granted) {
        flow.deficit += this.#quantum * this.#weight(flow.tenant);
        flow.granted = true;
      }
      const head = flow.items.peek()!;
      if (!atCap && head.cost <= flow.deficit) {
        flow.items.shift();
        flow.deficit -= head.cost;
        return head;
      }
      flow.granted = false;
      this.#cursor = (this.#cursor + 1) % this.#ring.length;
      visited++;
      if (atCap) capped++;
    }
    return undefined;
  }

  /**
   * After a whole round in which no head item was affordable (costs far above the
   * quantum), credits the rounds that would pass fruitlessly in one step instead of
   * spinning through them; every flow gains the same number of rounds, so shares hold.
   */
  #fastForward(): void {
    let rounds = Number.POSITIVE_INFINITY;
    const open = this.#ring.filter((flow) => (this.#running.get(flow.tenant) ?? 0) < this.#maxPerTenant);
    for (const flow of open) {
      const perRound = this.#quantum * this.#weight(flow.tenant);
      const need = Math.ceil((flow.items.peek()!.cost - flow.deficit) / perRound);
      rounds = Math.min(rounds, need);
    }
    const skip = Math.max(0, rounds - 1);
    for (const flow of open) flow.deficit += skip * this.#quantum * this.#weight(flow.tenant);
  }

  #start(item: Item, control: boolean): void {
    this.#dequeued(item);
    const labels = { scheduler: this.name, tenant: item.tenant };
    this.#metrics.admitted.inc(labels);
    this.#metrics.delay.observe(labels, Math.max(0, this.#now() - item.enqueuedAt) / 1000);
    if (control) this.#controlInFlight++;
    else {
      this.#inFlight++;
      this.#running.set(item.tenant, (this.#running.get(item.tenant) ?? 0) + 1);
    }
    // The slot is free before the caller resumes, so stats() never shows finished work.
    run(item.work).then(
      (value) => {
        this.#finish(item.tenant, control);
        item.resolve(value);
      },
      (error: unknown) => {
        this.#finish(item.tenant, control);
        item.reject(error);
      },
    );
  }

  #finish(tenant: string, control: boolean): void {
    if (control) this.#controlInFlight--;
    else {
      this.#inFlight--;
      const running = (this.#running.get(tenant) ?? 1) - 1;
      if (running === 0) this.#running.delete(tenant);
      else this.#running.set(tenant, running);
    }
    this.#pump();
  }

  #weight(tenant: string): number {
    return this.#weights.get(tenant) ?? 1;
  }

  #depth(tenant: string, depth: number): void {
    this.#metrics.queueDepth.set({ scheduler: this.name, tenant }, depth);
  }
}

function run(work: () => unknown): Promise<unknown> {
  try {
    return Promise.resolve(work());
  } catch (error) {
    return Promise.reject(error);
  }
}

function positive(what: string, value: number): number {
  if (!(Number.isFinite(value) && value > 0))
    throw new RangeError(`${what} must be a positive number, got ${value}`);
  return value;
}
