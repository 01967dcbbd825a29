import { EventEmitter } from 'node:events';
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { logger } from '@zmesh/shared';

const log = logger('leader-election');

export interface LeaseElectorOptions {
  namespace: string;
  /** The Lease's name. */
  name: string;
  /** This replica (the pod name). */
  identity: string;
  /** How long a holder's claim lasts without renewal (client-go's default: 15 s). */
  leaseSeconds?: number;
  /** How often the holder renews and the others retry (default: a third of the lease). */
  retryMs?: number;
}

interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

interface Lease {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec: LeaseSpec;
}

const GROUP = { group: 'coordination.k8s.io', version: 'v1', plural: 'leases' };

/**
 * Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does:
 * take the Lease when it is free or its holder's renewTime + leaseDurationSeconds has passed,
 * renew it while leading; every write carries the resourceVersion read, so of two replicas
 * racing, the API server's 409 Conflict lets exactly one win. A replica that cannot renew
 * within its own lease stops leading before another can take over. Events: 'leading',
 * 'following' (each on a change). Only the leader writes (waypoint objects, status); every
 * replica serves xDS.
 */
export class LeaseElector extends EventEmitter {
  readonly #api: CustomObjectsApi;
  readonly #opts: Required<LeaseElectorOptions>;
  #leading = false;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  /** When our last successful renewal was, for stepping down in time. */
  #renewedAt = 0;

  constructor(kc: KubeConfig, opts: LeaseElectorOptions) {
    super();
    this.#api = kc.makeApiClient(CustomObjectsApi);
    const leaseSeconds = opts.leaseSeconds ?? 15;
    this.#opts = { ...opts, leaseSeconds, retryMs: opts.retryMs ?? (leaseSeconds * 1000) / 3 };
  }

  /**
   * Leading, and renewed within the renew deadline (two thirds of the lease, as client-go's
   * 10 s of 15 s): a leader whose renewals stall stops acting as one before another replica
   * can take the Lease (after the whole lease), so two never write at once.
   */
  get leading(): boolean {
    return this.#leading && Date.now() - this.#renewedAt < (this.#opts.leaseSeconds * 1000 * 2) / 3;
  }

  start(): void {
    this.#stopped = false;
    void this.#tick();
  }

  /** Stops; a leader releases the Lease so that another replica takes over at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    if (!this.#leading) return;
    this.#set(false);
    const lease = await this.#read().catch(() => undefined);
    if (lease?.spec.holderIdentity !== this.#opts.identity) return;
    await this.#replace({
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: null,
        leaseDurationSeconds: 1,
        renewTime: microTime(new Date()),
      },
    }).catch(() => undefined);
  }

  async #tick(): Promise<void> {
    try {
      await this.#tryAcquireOrRenew();
    } catch (e) {
      log.warn({ err: (e as Error).message }, 'lease: API request failed');
    }
    if (this.#leading && Date.now() - this.#renewedAt > this.#opts.leaseSeconds * 1000) {
      log.warn('lease: not renewed within its duration; stepping down');
      this.#set(false);
    }
    if (!this.#stopped) this.#timer = setTimeout(() => void this.#tick(), this.#opts.retryMs).unref();
  }

  async #tryAcquireOrRenew(): Promise<void> {
    const now = new Date();
    const { identity, leaseSeconds, namespace, name } = this.#opts;
    const lease = await this.#read();
    if (lease === undefined) {
      const body: Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace },
        spec: {
          holderIdentity: identity,
          leaseDurationSeconds: leaseSeconds,
          acquireTime: microTime(now),
          renewTime: microTime(now),
          leaseTransitions: 0,
        },
      };
      if (await this.#write(() => this.#api.createNamespacedCustomObject({ ...GROUP, namespace, body })))
        this.#won(now);
      return;
    }
    const spec = lease.spec ?? {};
    const mine = spec.holderIdentity === identity;
    const renewed = spec.renewTime ? Date.parse(spec.renewTime) : 0;
    const expired = renewed + (spec.leaseDurationSeconds ?? leaseSeconds) * 1000 < now.getTime();
    if (!mine && spec.holderIdentity && !expired) {
      this.#set(false);
      return;
    }
    const next: Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: leaseSeconds,
        renewTime: microTime(now),
        ...(mine ? {} : { acquireTime: microTime(now), leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
      },
    };
    if (await this.#write(() => this.#replace(next))) this.#won(now);
    else this.#set(false);
  }

  /** True when written; false on 409 (someone else wrote first) or 404/409 on create. */
  async #write(op: () => Promise<unknown>): Promise<boolean> {
    try {
      await op();
      return true;
    } catch (e) {
      if ((e as { code?: number }).code === 409) return false;
      throw e;
    }
  }

  #won(at: Date): void {
    this.#renewedAt = at.getTime();
    this.#set(true);
  }

  #set(leading: boolean): void {
    if (leading === this.#leading) return;
    this.#leading = leading;
    log.info(
      { identity: this.#opts.identity, lease: `${this.#opts.namespace}/${this.#opts.name}` },
      leading ? 'leading' : 'following',
    );
    this.emit(leading ? 'leading' : 'following');
  }

  async #read(): Promise<Lease | undefined> {
    try {
      return (await this.#api.getNamespacedCustomObject({
        ...GROUP,
        namespace: this.#opts.namespace,
        name: this.#opts.name,
      })) as Lease;
    } catch (e) {
      if ((e as { code?: number }).code === 404) return undefined;
      throw e;
    }
  }

  #replace(body: Lease): Promise<unknown> {
    return this.#api.replaceNamespacedCustomObject({
      ...GROUP,
      namespace: this.#opts.namespace,
      name: this.#opts.name,
      body,
    });
  }
}

/** Kubernetes MicroTime: RFC 3339 with microseconds. */
function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
