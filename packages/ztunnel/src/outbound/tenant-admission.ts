import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ok, type Result, type StreamWindowMode, type ZmeshError } from '@zmesh/shared';
import type { Registry } from 'prom-client';
import { bidirectionalCopy, type CopyResult } from '../forward/bidirectional-copy.js';
import { AttemptRates } from '../tenancy/attempt-rates.js';
import { ByteFairness, type TenantByteStats } from '../tenancy/byte-fairness.js';
import { FairScheduler } from '../tenancy/fair-scheduler.js';
import { MemoryGuard } from '../tenancy/memory-guard.js';
import { nodeContention, SharedQuotaTable, sharedNow } from '../tenancy/shared-quotas.js';
import { type ConnectBucket, type QuotaLimits, TenantQuotas } from '../tenancy/tenant-quotas.js';

export interface TenancyOptions {
  /**
   * On (default): per-tenant quotas, deficit-round-robin setup scheduling and byte-copy
   * fairness. Off: one FIFO queue and plain copying, as a proxy without tenancy does;
   * kept so the noisy-neighbor harness can show the difference in one run.
   */
  fairness?: boolean;
  limits?: Partial<QuotaLimits>;
  overrides?: Record<string, Partial<QuotaLimits>>;
  /** Node-wide cap on bytes buffered in flight; the largest consumer is shed first. */
  memoryCapBytes?: number;
  /** Connection setups (TCP + TLS + CONNECT) in progress at once, node-wide. */
  maxSetupsInFlight?: number;
  /**
   * `--workers N`: the node-wide counters every worker maps (`sharedQuotaBuffer()`), so a
   * tenant's connections, pending connects and connect bucket are one across workers.
   */
  sharedQuotas?: SharedArrayBuffer;
  /** The worker slot counting in `sharedQuotas` (its ledger: a dead worker's share is given back). */
  worker?: number;
}

/** A tenant's admission of one connection: released when the connection closes. */
export interface Admission {
  /** The connect finished (or failed): it no longer counts as pending. */
  setupDone(): void;
  release(): void;
  /** The tenant's connect bucket after this connection's token (absent with `--fairness off`). */
  readonly bucket?: ConnectBucket;
}

/**
 * Setups in flight node-wide. Most are a new stream on a pooled connection (a round trip),
 * few a TLS handshake; a tenant may hold at most ¾ of them (FairScheduler), so one
 * tenant's storm leaves a quarter to the others even before round-robin applies.
 */
const DEFAULT_MAX_SETUPS_IN_FLIGHT = 256;
/** Pending connects per tenant: 500 connects/s at up to 2 s each under load. */
const DEFAULT_MAX_PENDING_CONNECTS = 1024;
/**
 * Connect rate of the tenant opening connections fastest while the node is contended (the
 * event loop under pressure, more than one tenant moving bytes). Each connection costs
 * ztunnel about 0.5 ms of CPU for both ends; at its own 500/s quota one tenant's storm or
 * hoard took a quarter to half of the loop from the others.
 */
const CONTENDED_CONNECT_RATE = 100;
/**
 * What that tenant's bucket holds meanwhile: 20 connects, about 10 ms of ztunnel's CPU.
 * At 100 (a second of the contended rate), the bucket's content was spent in one go on a
 * busy node: a hoard's first 0.4 s put the victim's p99 at 2x.
 */
const CONTENDED_CONNECT_BURST = 20;

/**
 * Everything the outbound path shares between tenants (docs/design.md §7), in one place: the
 * connection-rate, open-connection and pending-connect quotas, the fair queue for
 * connection setup and stream admission, and fair byte copying under event-loop lag.
 */
/** See `appSendBufferBytes`; the kernel doubles it, so 512 KiB per socket in all. */
const APP_SEND_BUFFER_BYTES = 256 * 1024;

export class TenantAdmission {
  readonly fairness: boolean;
  readonly quotas?: TenantQuotas;
  readonly memory: MemoryGuard;
  private readonly scheduler: FairScheduler;
  private readonly bytes?: ByteFairness;
  readonly #attempts = new AttemptRates();
  /** `--workers N`: the node-wide table; contention (pressure, active tenants, attempt rates) is read there. */
  readonly shared: SharedQuotaTable | undefined;

  constructor(options: TenancyOptions, registry: Registry) {
    this.fairness = options.fairness ?? true;
    this.shared = options.sharedQuotas
      ? new SharedQuotaTable(options.sharedQuotas, options.worker)
      : undefined;
    this.memory = new MemoryGuard({
      registry,
      ...(options.memoryCapBytes ? { capBytes: options.memoryCapBytes } : {}),
      ...(this.shared ? { shared: this.shared.buffered() } : {}),
    });
    this.scheduler = new FairScheduler({
      name: 'outbound_setup',
      mode: this.fairness ? 'fair' : 'fifo',
      maxInFlight: options.maxSetupsInFlight ?? DEFAULT_MAX_SETUPS_IN_FLIGHT,
      registry,
    });
    if (this.fairness) {
      const shared = this.shared;
      const quotas = new TenantQuotas({
        registry,
        memory: this.memory,
        defaults: { maxPendingConnects: DEFAULT_MAX_PENDING_CONNECTS, ...options.limits },
        ...(options.overrides ? { overrides: options.overrides } : {}),
        ...(shared ? { shared } : {}),
      });
      this.quotas = quotas;
      this.bytes = new ByteFairness({
        registry,
        memory: this.memory,
        ...(shared
          ? {
              node: nodeContention(shared, (tenant) => quotas.limitsOf(tenant).connectBurst),
            }
          : {}),
      });
    }
  }

  /** Takes a connection-rate token, an open-connection lease and a pending-connect lease. */
  admit(tenant: string): Result<Admission, ZmeshError> {
    const quotas = this.quotas;
    if (!quotas) return ok({ setupDone: () => {}, release: () => {} });
    const token = quotas.takeConnectToken(
      tenant,
      this.#attempted(tenant) ? { rate: CONTENDED_CONNECT_RATE, burst: CONTENDED_CONNECT_BURST } : undefined,
    );
    if (!token.ok) return token;
    const connection = quotas.acquireConnection(tenant);
    if (!connection.ok) return connection;
    const pending = quotas.acquirePending(tenant);
    if (!pending.ok) {
      connection.value.release();
      return pending;
    }
    return ok({
      bucket: token.value,
      setupDone: () => pending.value.release(),
      release: () => {
        pending.value.release();
        connection.value.release();
      },
    });
  }

  /**
   * Counts a connect attempt; true when this tenant attempts connects fastest (above
   * CONTENDED_CONNECT_RATE) while the node is contended, so its bucket refills slower.
   */
  #attempted(tenant: string): boolean {
    const shared = this.shared;
    if (shared && this.quotas) {
      // Node-wide: a tenant on one worker contends with tenants on the others.
      const now = sharedNow();
      const slot = shared.slotOf(tenant, this.quotas.limitsOf(tenant).connectBurst, now);
      if (slot >= 0) {
        const { rate, fastestOther } = shared.recordAttempt(slot, now);
        return (
          shared.pressured(now) &&
          shared.activeTenants(now) > 1 &&
          rate > CONTENDED_CONNECT_RATE &&
          rate >= fastestOther
        );
      }
    }
    const { rate, fastestOther } = this.#attempts.record(tenant);
    const bytes = this.bytes;
    return (
      bytes?.pressured === true &&
      bytes.activeTenants > 1 &&
      rate > CONTENDED_CONNECT_RATE &&
      rate >= fastestOther
    );
  }

  /** Runs one connection setup in the tenant's turn. */
  setup<T>(tenant: string, work: () => Promise<T>): Promise<T> {
    return this.scheduler.schedule(tenant, 1, work);
  }

  /** Copies both ways; with fairness, a lagging event loop reads the heaviest tenants less. */
  copy(tenant: string, downstream: Socket, upstream: Duplex): Promise<CopyResult> {
    const bytes = this.bytes;
    if (!bytes) return bidirectionalCopy(downstream, upstream);
    return new Promise((resolve) => {
      let open = 2;
      const done = () => {
        open -= 1;
        if (open > 0) return;
        resolve({ sent: downstream.bytesRead, received: downstream.bytesWritten });
      };
      // 'close' is emitted once: on() spares the per-listener wrapper once() allocates.
      downstream.on('close', done);
      upstream.on('close', done);
      bytes.attach(tenant, downstream, upstream);
      // A side closed before the copy began (the client reset during tunnel setup) emits no
      // more 'close': count it here and end the other side, or it stays open for good.
      if (downstream.destroyed || upstream.destroyed) {
        for (const side of [downstream, upstream]) if (side.closed) done();
        downstream.destroy();
        upstream.destroy();
      }
    });
  }

  /** Per-tenant copy state (bytes, pauses, unflushed bytes, links) for `/config_dump`. */
  byteStats(): Record<string, TenantByteStats> {
    return this.bytes?.stats() ?? {};
  }

  /**
   * HBONE sessions carry one tenant each (the pool key has it), so sharing a session's
   * window budget between its streams bounds what one tenant's readers that do not read
   * can make this proxy buffer. Off: fixed windows, as a proxy without tenancy has.
   */
  get streamWindows(): StreamWindowMode {
    return this.fairness ? 'shared' : 'fixed';
  }

  /**
   * SO_SNDBUF of ztunnel's sockets toward applications (the captured pod's side of its
   * outbound connections, and the inbound hop to the app), or undefined (kernel
   * autotuning) when fairness is off. Autotuned, each socket to a client that does not
   * read grew to 4 MiB: 64 such readers kept ztunnel copying for seconds into 250 MB of
   * kernel buffers on one tenant's behalf.
   */
  get appSendBufferBytes(): number | undefined {
    return this.fairness ? APP_SEND_BUFFER_BYTES : undefined;
  }

  /** The inbound copier with byte fairness, or undefined (plain splice) when fairness is off. */
  get inboundCopy(): ((tenant: string, stream: Duplex, upstream: Duplex) => void) | undefined {
    const bytes = this.bytes;
    if (!bytes) return undefined;
    return (tenant, stream, upstream) => {
      bytes.attach(tenant, stream, upstream);
    };
  }

  close(): void {
    this.bytes?.close();
  }
}
