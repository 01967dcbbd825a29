import { closeSync, openSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import {
  type ErrorCode,
  EVENT_LOOP_SAMPLE_MS,
  err,
  logger,
  ok,
  type Result,
  registerTaskFailures,
  type TrustBundle,
  ZmeshError,
} from '@zmesh/shared';
import { AggregatorRegistry, Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { AdminServers } from '../admin/admin-servers.js';
import { type AddWorkloadRequest, type WorkloadHandler, ZdsClient } from '../capture/zds-client.js';
import type { CertificateSigner } from '../identity/cert-manager.js';
import type { ConfigTarget, ConfigUpdate } from '../state/config-target.js';
import { SharedQuotaTable } from '../tenancy/shared-quotas.js';
import { Channel } from './channel.js';
import type { ConfigPush, SignRequest, WorkerDump, WorkerInit } from './worker-protocol.js';

const log = logger('workers');

/** A worker that does not answer a metrics, dump or readiness call within this is left out of the answer. */
const CALL_TIMEOUT_MS = 2000;
/** How often authorization staleness (the snapshot's age) is sent to the workers. */
const STALENESS_PUSH_MS = 1000;
/** Restarts of one slot within RESTART_WINDOW_MS before the process gives up (exit 1). */
const MAX_RESTARTS = 5;
const RESTART_WINDOW_MS = 60_000;

export interface ZtunnelWorkersOptions {
  count: number;
  /** What every worker starts with (index, generation and roots are filled in here). */
  init: Omit<WorkerInit, 'index' | 'generation' | 'roots'>;
  bundle: TrustBundle;
  /** The one CA client (or local CA) of the node: workers' CSRs are signed through it. */
  signer: CertificateSigner;
  ports: { admin: number; metrics: number; ready: number };
  /** Default: a new one (the CLI passes the one the BPF and xDS metrics share). */
  registry?: Registry;
  /** Capture mode: the node agent's socket; the pod registry lives here, pods on workers. */
  zds?: { socket: string; cgroupRoot: string };
  defaultMetrics?: boolean;
  /** Called when a worker slot died too often: the process should stop. */
  onFatal?: (why: string) => void;
  /** The worker module (tests run from dist/, the daemon from its bundle). */
  entry?: URL;
}

interface Slot {
  index: number;
  generation: number;
  worker: Worker;
  channel: Channel;
  /** Set while the slot's worker is starting again after a death: calls wait for it. */
  restarting?: Promise<void>;
  restarts: number[];
  /** The slot's workloads (explicit mode) or pods (capture mode). */
  load: Set<string>;
}

interface HomedPod {
  req: AddWorkloadRequest;
  /** The namespace held open here for the pod's life, so a re-homed pod reopens it. */
  netnsFd: number;
  slot: number;
}

/**
 * `--workers N` (N > 1): the main thread of a multi-threaded ztunnel (ARCHITECTURE.md, "State
 * and concurrency"). It keeps the node-wide pieces: the config source (it is the xDS
 * client's `ConfigTarget`), the signer (the one CA client), admin/metrics/readiness, the ZDS
 * connection and the pod registry. Each worker thread (`worker-entry.ts`) runs a `Ztunnel`
 * for the pods sharded to it. A new pod goes to the worker with the fewest pods; a worker
 * that dies is started again and its pods re-homed (to the least loaded workers, the new one
 * included), while the other workers' connections carry on. Config pushes carry a version
 * and are applied whole by each worker in one turn of its loop.
 */
export class ZtunnelWorkers implements ConfigTarget, WorkloadHandler {
  readonly metrics: { registry: Registry };
  readonly certs: { lifetimeMs(): number };
  readonly authorizer: { setStaleness(s: { ageMs: () => number; maxMs: () => number } | undefined): void };
  readonly #options: ZtunnelWorkersOptions;
  readonly #slots: Slot[] = [];
  readonly #pods = new Map<string, HomedPod>();
  readonly #admin: AdminServers;
  readonly #agent: ZdsClient | undefined;
  readonly #restarts: Counter;
  /** The node-wide counts' table, for giving back a dead worker's share (the main thread counts nothing itself). */
  readonly #quotas: SharedQuotaTable | undefined;
  #push: ConfigPush | undefined;
  #version = 0;
  #staleness: { ageMs: () => number; maxMs: () => number } | undefined;
  #stalenessTimer: NodeJS.Timeout | undefined;
  #configIncomplete: () => string | undefined = () => undefined;
  #stopping = false;
  #draining = false;

  constructor(options: ZtunnelWorkersOptions) {
    const shared = options.init.tenancy.sharedQuotas;
    this.#quotas = shared ? new SharedQuotaTable(shared) : undefined;
    this.#options = options;
    const registry = options.registry ?? new Registry();
    this.metrics = { registry };
    // At prom-client's default 10 ms precision the histogram alone woke an idle main thread 100 times a second.
    if (options.defaultMetrics ?? true)
      collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    registerTaskFailures(registry);
    const ttlMs = (options.init.certTtlSeconds ?? 24 * 3600) * 1000;
    this.certs = { lifetimeMs: () => ttlMs };
    this.authorizer = {
      setStaleness: (s) => {
        this.#staleness = s;
        this.#pushStaleness();
      },
    };
    this.#restarts = new Counter({
      name: 'zmesh_worker_restarts_total',
      help: 'ztunnel worker threads started again after they died (their pods re-homed)',
      registers: [registry],
    });
    const slots = this.#slots;
    new Gauge({
      name: 'zmesh_worker_pods',
      help: 'Pods (capture mode) or local workloads (explicit mode) served by each worker thread',
      labelNames: ['worker'],
      registers: [registry],
      // Only the main thread registers it: summing over workers does not double it.
      aggregator: 'first',
      collect() {
        for (const s of slots) this.set({ worker: String(s.index) }, s.load.size);
      },
    });
    this.#admin = new AdminServers({
      host: options.init.address,
      ports: options.ports,
      registry,
      metricsText: () => this.mergedMetrics(),
      configDump: () => this.configDump(),
      readiness: () => this.readiness(),
      quit: () => void this.stop(),
      killWorker: (index) => this.kill(index),
    });
    if (options.zds)
      this.#agent = new ZdsClient(this, {
        path: options.zds.socket,
        cgroupRoot: options.zds.cgroupRoot,
        registry,
      });
    options.bundle.on('change', () => {
      const roots = options.bundle.roots();
      for (const s of this.#slots) s.channel.call('roots', roots).catch(() => {});
    });
  }

  get size(): number {
    return this.#slots.length;
  }

  async start(): Promise<void> {
    for (let i = 0; i < this.#options.count; i++) this.#slots.push(this.#spawn(i, 0, []));
    this.#stalenessTimer = setInterval(() => this.#pushStaleness(), STALENESS_PUSH_MS);
    this.#stalenessTimer.unref();
    await this.#admin.start();
    // The single loop's line, so what operators and probes look for does not depend on --workers.
    const { node, address } = this.#options.init;
    log.info({ node, address, workers: this.#options.count }, 'ztunnel started');
  }

  /** As `Ztunnel.startEnrolment`: the node agent's pods, once the config at hand is applied. */
  startEnrolment(): void {
    this.#agent?.start();
  }

  setConfigReadiness(incomplete: () => string | undefined): void {
    this.#configIncomplete = incomplete;
  }

  /**
   * One version to every worker. Each applies it whole in one turn (policies, then state);
   * the push resolves when all have, or with the reasons of a refusal (every worker checks
   * the same policies the same way, so they agree).
   */
  async applyConfig(update: ConfigUpdate): Promise<Result<number>> {
    const version = ++this.#version;
    const previous = this.#push;
    if (!this.#options.zds) this.#assign(update);
    this.#push = { version, update };
    const answers = await Promise.all(
      this.#slots.map((s) =>
        this.#ready(s)
          .then(() => s.channel.call<{ ok: boolean; reasons?: string[] }>('config', this.#pushFor(s)))
          .catch((e: unknown) => ({ ok: false, reasons: [(e as Error).message] })),
      ),
    );
    const refused = answers.find((a) => !a.ok);
    if (refused) {
      // Policy refusals are the same on every worker: the active config stays the previous one.
      if (previous) this.#push = previous;
      log.warn({ version, reasons: refused.reasons }, 'config refused');
      return err(refused.reasons ?? ['refused by a worker']);
    }
    this.#pushStaleness();
    return ok(version);
  }

  has(uid: string): boolean {
    return this.#pods.has(uid);
  }

  async addWorkload(req: AddWorkloadRequest): Promise<void> {
    const existing = this.#pods.get(req.uid);
    const slot = existing ? this.#slots[existing.slot]! : this.#leastLoaded();
    // The agent's fd closes when this request is answered: the pod's namespace is held here.
    const netnsFd = openSync(req.netns, 'r');
    const homed: HomedPod = { req: { ...req, netns: `/proc/self/fd/${netnsFd}` }, netnsFd, slot: slot.index };
    try {
      await this.#ready(slot);
      await slot.channel.call('add', homed.req);
    } catch (e) {
      closeSync(netnsFd);
      throw asZmeshError(e, 'ZM_ERR_CAPTURE_NETNS');
    }
    if (existing) closeSync(existing.netnsFd);
    this.#pods.set(req.uid, homed);
    slot.load.add(req.uid);
    log.info({ pod: req.uid, worker: slot.index }, 'pod homed');
  }

  async delWorkload(uid: string): Promise<void> {
    const pod = this.#pods.get(uid);
    if (!pod) throw new ZmeshError('ZM_ERR_AGENT_UNKNOWN_WORKLOAD', { uid });
    const slot = this.#slots[pod.slot]!;
    this.#pods.delete(uid);
    slot.load.delete(uid);
    try {
      await this.#ready(slot);
      await slot.channel.call('del', uid);
    } finally {
      closeSync(pod.netnsFd);
    }
  }

  async snapshot(uids: string[]): Promise<void> {
    const keep = new Set(uids);
    for (const uid of [...this.#pods.keys()]) if (!keep.has(uid)) await this.delWorkload(uid);
  }

  /** Which worker serves a pod or workload (tests, config_dump). */
  workerOf(uid: string): number | undefined {
    for (const s of this.#slots) if (s.load.has(uid)) return s.index;
    return undefined;
  }

  /** Ends a worker thread as a crash would (tests, the harness): it is started again. */
  async kill(index: number): Promise<void> {
    const slot = this.#slots[index];
    if (!slot) throw new RangeError(`no worker ${index}`);
    await slot.worker.terminate();
  }

  /** Resolves once every worker slot is up (after a restart, with its pods back). */
  async settled(): Promise<void> {
    await Promise.all(this.#slots.map((s) => this.#ready(s)));
  }

  async readiness(): Promise<{ ready: boolean; reasons: string[] }> {
    const incomplete = this.#configIncomplete();
    const reasons = incomplete ? [incomplete] : [];
    for (const d of await this.#dumps()) {
      if ('missing' in d) reasons.push(`worker ${d.index}: ${d.missing}`);
      else reasons.push(...d.readiness.reasons);
    }
    return { ready: reasons.length === 0, reasons };
  }

  /** One dump for the node: the first worker's view of the mesh, every worker's local parts. */
  async configDump(): Promise<unknown> {
    const dumps = await this.#dumps();
    const answered = dumps.filter((d): d is WorkerDump => !('missing' in d));
    const merged: Record<string, unknown> = {
      ...((answered[0]?.configDump as Record<string, unknown>) ?? {}),
      node: this.#options.init.node,
      pid: process.pid,
      version: this.#version,
    };
    for (const key of ['local', 'enrolled', 'plaintextRedirects', 'forwards', 'certificates', 'connections'])
      merged[key] = answered.flatMap(
        (d) => ((d.configDump as Record<string, unknown[]>)[key] ?? []) as unknown[],
      );
    merged.pool = undefined;
    merged.tenants = undefined;
    merged.workers = dumps.map((d) =>
      'missing' in d
        ? d
        : {
            index: d.index,
            threadId: d.threadId,
            version: d.version,
            pods: [...(this.#slots[d.index]?.load ?? [])],
            pool: (d.configDump as Record<string, unknown>).pool,
            tenants: (d.configDump as Record<string, unknown>).tenants,
          },
    );
    return merged;
  }

  /**
   * /metrics for the node: this thread's registry and every worker's, merged with prom-client's
   * `AggregatorRegistry.aggregate` (the part of it that is not tied to `cluster`): counters
   * and histograms summed, so a series is reported once however many workers count it.
   */
  async mergedMetrics(): Promise<string> {
    // prom-client omits some process metrics when aggregating (process_start_time_seconds,
    // which tells two ztunnels apart during an upgrade): only this thread reports them, so keep them.
    const own = (await this.metrics.registry.getMetricsAsJSON()).map((m) =>
      m.aggregator === 'omit' ? { ...m, aggregator: 'first' as const } : m,
    );
    const theirs = await Promise.all(
      this.#slots.map((s) => withTimeout(s.channel.call<unknown[]>('metrics')).catch(() => [])),
    );
    return AggregatorRegistry.aggregate([own, ...theirs] as Parameters<
      typeof AggregatorRegistry.aggregate
    >[0]).metrics();
  }

  /** SIGTERM: leave the agent, hand admin over, drain every worker (docs/upgrade.md). */
  async drain(graceMs: number): Promise<void> {
    if (this.#stopping || this.#draining) return;
    // A worker that ends its drain exits: that is not a crash to restart from.
    this.#draining = true;
    this.#agent?.close();
    await this.#admin
      .handOver()
      .catch((e: unknown) =>
        log.warn({ err: (e as Error).message }, 'admin hand-over failed: draining anyway'),
      );
    await Promise.all(this.#slots.map((s) => s.channel.call('stop', graceMs).catch(() => {})));
    await this.stop();
  }

  async stop(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    clearInterval(this.#stalenessTimer);
    this.#agent?.close();
    await Promise.all(
      this.#slots.map(async (s) => {
        await withTimeout(s.channel.call('stop')).catch(() => {});
        await s.worker.terminate();
      }),
    );
    for (const pod of this.#pods.values()) closeSync(pod.netnsFd);
    this.#pods.clear();
    await this.#admin.stop();
    log.info({ node: this.#options.init.node, workers: this.#options.count }, 'ztunnel stopped');
  }

  #spawn(index: number, generation: number, restarts: number[]): Slot {
    const entry = this.#options.entry ?? new URL('./worker-entry.js', import.meta.url);
    const init: WorkerInit = {
      ...this.#options.init,
      index,
      generation,
      roots: this.#options.bundle.roots(),
    };
    const worker = new Worker(entry, { workerData: init });
    const channel = new Channel(worker);
    channel.handle('sign', (r: SignRequest) => this.#options.signer.sign(r.csrPem, r.identity, r.ttlSeconds));
    const slot: Slot = { index, generation, worker, channel, restarts, load: new Set() };
    worker.on('error', (e) => log.error({ worker: index, err: e.message }, 'worker failed'));
    worker.once('exit', (code) => {
      channel.close(new Error(`worker ${index} exited (${code})`));
      // Its connections died with it, so what it held of the node-wide counts goes back,
      // also during a drain (the other workers' connections still count against them).
      const returned = this.#quotas?.reclaim(index) ?? 0;
      if (this.#stopping || this.#draining) return;
      log.error({ worker: index, code, returned }, 'worker exited: starting it again, its pods re-homed');
      this.#restarts.inc();
      this.#restart(slot);
    });
    return slot;
  }

  #restart(dead: Slot): void {
    const now = Date.now();
    const restarts = [...dead.restarts.filter((t) => now - t < RESTART_WINDOW_MS), now];
    if (restarts.length > MAX_RESTARTS) {
      const why = `worker ${dead.index} died ${restarts.length} times in ${RESTART_WINDOW_MS / 1000} s`;
      log.fatal({ worker: dead.index }, why);
      this.#options.onFatal?.(why);
      return;
    }
    const fresh = this.#spawn(dead.index, dead.generation + 1, restarts);
    this.#slots[dead.index] = fresh;
    const orphans = [...dead.load];
    fresh.restarting = this.#rehome(fresh, orphans).finally(() => {
      fresh.restarting = undefined;
    });
    fresh.restarting.catch((e: unknown) =>
      log.error({ worker: dead.index, err: (e as Error).message }, 're-homing failed'),
    );
  }

  /** A dead worker's pods (or workloads) go to the least loaded workers; the config goes first. */
  async #rehome(fresh: Slot, orphans: string[]): Promise<void> {
    const touched = new Set<Slot>([fresh]);
    const moves: [string, Slot][] = [];
    for (const uid of orphans) {
      const to = this.#leastLoaded();
      to.load.add(uid);
      touched.add(to);
      moves.push([uid, to]);
      const pod = this.#pods.get(uid);
      if (pod) pod.slot = to.index;
    }
    // Config first (the new worker's, and the new assignments of others in explicit mode)...
    if (this.#push)
      await Promise.all(
        [...touched].map((s) =>
          s === fresh || !this.#options.zds ? s.channel.call('config', this.#pushFor(s)) : undefined,
        ),
      );
    // ...then the pods, capture attached already (the BPF pins are adopted, never detached).
    await Promise.all(
      moves.map(async ([uid, to]) => {
        const pod = this.#pods.get(uid);
        if (!pod) return;
        await to.channel.call('add', pod.req).catch((e: unknown) => {
          log.error({ pod: uid, worker: to.index, err: (e as Error).message }, 'pod not re-homed');
        });
      }),
    );
    log.info({ worker: fresh.index, rehomed: orphans.length }, 'worker restarted');
  }

  #pushFor(slot: Slot): ConfigPush {
    const push = this.#push!;
    return this.#options.zds ? push : { ...push, assigned: [...slot.load] };
  }

  /** Explicit mode: local workloads keep their worker; new ones go to the least loaded. */
  #assign(update: ConfigUpdate): void {
    const node = this.#options.init.node;
    const local = new Set(
      update.workloads.filter((w) => w.node === node && w.tunnelProtocol === 'HBONE').map((w) => w.uid),
    );
    for (const s of this.#slots) for (const uid of s.load) if (!local.has(uid)) s.load.delete(uid);
    for (const uid of local) if (this.workerOf(uid) === undefined) this.#leastLoaded().load.add(uid);
  }

  #leastLoaded(): Slot {
    let best = this.#slots[0]!;
    for (const s of this.#slots) if (s.load.size < best.load.size) best = s;
    return best;
  }

  #ready(slot: Slot): Promise<void> {
    return slot.restarting ?? Promise.resolve();
  }

  #pushStaleness(): void {
    const s = this.#staleness;
    const value = s ? { ageMs: s.ageMs(), maxMs: s.maxMs() } : null;
    for (const slot of this.#slots) slot.channel.call('staleness', value).catch(() => {});
  }

  /** Every answering worker's own dump (its mesh view, version and readiness). */
  async workerDumps(): Promise<WorkerDump[]> {
    return (await this.#dumps()).filter((d): d is WorkerDump => !('missing' in d));
  }

  async #dumps(): Promise<(WorkerDump | { index: number; missing: string })[]> {
    return Promise.all(
      this.#slots.map((s) =>
        // A worker still coming back from a restart is reported as such, not waited for.
        (s.restarting
          ? Promise.reject(new Error('restarting'))
          : withTimeout(s.channel.call<WorkerDump>('dump'))
        ).catch((e: unknown) => ({ index: s.index, missing: `not answering (${(e as Error).message})` })),
      ),
    );
  }
}

function withTimeout<T>(p: Promise<T>, ms = CALL_TIMEOUT_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A worker's refusal keeps its stable code across the thread boundary. */
function asZmeshError(e: unknown, fallback: ErrorCode): ZmeshError {
  const code = (e as { code?: string })?.code;
  const reason = (e as Error)?.message ?? String(e);
  return new ZmeshError(code?.startsWith('ZM_ERR_') ? (code as ErrorCode) : fallback, { reason });
}
