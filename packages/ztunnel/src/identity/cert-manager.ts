import { EventEmitter } from 'node:events';
import {
  type CertificateSigner,
  type Credential,
  generateCsr,
  guardedTimeout,
  logger,
  ZmeshError,
} from '@zmesh/shared';
import { Counter, Gauge, type Registry } from 'prom-client';

const log = logger('certs');

/** Signs a CSR for one identity: the CA client in production, a local CA in explicit mode. */
export type { CertificateSigner };

export interface CertManagerOptions {
  signer: CertificateSigner;
  /** Requested lifetime of each workload certificate. */
  ttlSeconds: number;
  /** Bound on CSRs in flight at once, so a burst of new pods cannot flood the CA. */
  maxInFlight?: number;
  backoff?: { initialMs: number; maxMs: number };
  /**
   * How long before a certificate's not-after 'expiring' is emitted, so connections that
   * use it can be drained while it is still valid. Default: a tenth of its lifetime,
   * at most DEFAULT_MAX_EXPIRING_LEAD_MS.
   */
  expiringLeadMs?: (lifetimeMs: number) => number;
  registry?: Registry;
  now?: () => number;
  /** Builds the credential from key and chain; injected so this module stays free of X.509 parsing. */
  toCredential: (identity: string, keyPem: string, chain: string[]) => Credential;
  /**
   * Runs one certificate request in its turn; the proxy passes its per-tenant fair queue so
   * one tenant's burst of new pods cannot starve another's (docs/design.md §7). Without it, a
   * bounded FIFO (`maxInFlight`).
   */
  schedule?: <T>(identity: string, work: () => Promise<T>) => Promise<T>;
  /**
   * Credentials kept across restarts (`--persist-keys`): an identity's first request takes
   * a kept one that is still valid instead of asking the CA, and every credential issued
   * is handed back to be kept.
   */
  store?: CredentialStore;
}

/** Where credentials outlive the process (persisted-keys.ts); it vouches for what it returns. */
export interface CredentialStore {
  load(identity: string): Promise<Credential | undefined>;
  save(cred: Credential): Promise<void>;
}

export const DEFAULT_MAX_CSRS_IN_FLIGHT = 8;
const DEFAULT_MAX_EXPIRING_LEAD_MS = 60_000;

interface Slot {
  identity: string;
  current?: Credential;
  inflight?: Promise<Credential>;
  timer?: NodeJS.Timeout;
  /** One per credential issued and not yet expired: at most the current and the one it replaced. */
  readonly expiring: Set<NodeJS.Timeout>;
  failures: number;
  waiters: number;
  /** The store was asked for this identity already (it is asked once, before the first CSR). */
  looked?: boolean;
}

/**
 * One certificate per identity, fetched as soon as a local workload appears, renewed at
 * half-life. A failed renewal keeps the still-valid certificate and retries with
 * jittered exponential backoff; an expired certificate is never handed out.
 * Emits 'rotated' (identity, credential, previous?) so listeners swap their TLS context, and
 * 'expiring' (identity, credential) shortly before a credential's not-after, whether or not
 * it has been replaced, so connections still using it can be drained (`drainOnCertChange`).
 */
export class CertManager extends EventEmitter {
  private readonly slots = new Map<string, Slot>();
  private readonly queue: Array<() => void> = [];
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly backoff: { initialMs: number; maxMs: number };
  private readonly now: () => number;
  private readonly failures?: Counter;
  private stopped = false;

  constructor(private readonly options: CertManagerOptions) {
    super();
    this.maxInFlight = options.maxInFlight ?? DEFAULT_MAX_CSRS_IN_FLIGHT;
    this.backoff = options.backoff ?? { initialMs: 500, maxMs: 30_000 };
    this.now = options.now ?? Date.now;
    if (options.registry) {
      const now = this.now;
      const slots = this.slots;
      new Gauge({
        name: 'zmesh_cert_seconds_to_earliest_expiry',
        help: 'Seconds until the earliest workload certificate expires (negative: expired)',
        registers: [options.registry],
        collect() {
          const times = [...slots.values()].flatMap((s) => (s.current ? [s.current.notAfter.getTime()] : []));
          this.set(times.length ? (Math.min(...times) - now()) / 1000 : 0);
        },
      });
      // With the expiry above, the alert "less than a quarter of its life left" needs no
      // threshold in absolute seconds, so the same rule fits 24 h and 20 s certificates.
      new Gauge({
        name: 'zmesh_cert_earliest_lifetime_seconds',
        help: 'Total lifetime (not-after minus not-before) of the earliest-expiring workload certificate; 0 with none',
        registers: [options.registry],
        collect() {
          const held = [...slots.values()].flatMap((s) => (s.current ? [s.current] : []));
          const first = held.sort((a, b) => a.notAfter.getTime() - b.notAfter.getTime())[0];
          this.set(first ? (first.notAfter.getTime() - first.notBefore.getTime()) / 1000 : 0);
        },
      });
      this.failures = new Counter({
        name: 'zmesh_cert_renewal_failures_total',
        help: 'Failed certificate requests',
        registers: [options.registry],
      });
    }
  }

  /** Starts fetching `identity`'s certificate without waiting for it. */
  prefetch(identity: string): void {
    this.fetch(identity).catch(() => {});
  }

  /** The valid certificate for `identity`, if one is held now. */
  get(identity: string): Credential | undefined {
    const current = this.slots.get(identity)?.current;
    return current && current.notAfter.getTime() > this.now() ? current : undefined;
  }

  /** The valid certificate, fetching one when none is held. */
  async fetch(identity: string): Promise<Credential> {
    const held = this.get(identity);
    if (held) return held;
    const slot = this.slot(identity);
    return slot.inflight ?? this.request(slot);
  }

  /**
   * Takes a credential obtained elsewhere (keys persisted across a restart) as if just
   * issued: used while valid, renewed at half-life (at once if that has passed).
   */
  adopt(cred: Credential): boolean {
    if (cred.notAfter.getTime() <= this.now()) return false;
    const slot = this.slot(cred.identity);
    const previous = slot.current;
    slot.current = cred;
    this.scheduleRenewal(slot, halfLife(cred, this.now()));
    this.scheduleExpiring(slot, cred);
    log.info({ identity: cred.identity, notAfter: cred.notAfter.toISOString() }, 'certificate adopted');
    this.emit('rotated', cred.identity, cred, previous);
    return true;
  }

  /** Lifetime of the newest certificate held (what the CA actually grants), else the requested TTL. */
  lifetimeMs(): number {
    const held = [...this.slots.values()].flatMap((s) => (s.current ? [s.current] : []));
    const newest = held.sort((a, b) => b.notBefore.getTime() - a.notBefore.getTime())[0];
    return newest ? newest.notAfter.getTime() - newest.notBefore.getTime() : this.options.ttlSeconds * 1000;
  }

  /** Failed requests in a row for `identity` (0 once one succeeds): why readiness waits. */
  failuresOf(identity: string): number {
    return this.slots.get(identity)?.failures ?? 0;
  }

  forget(identity: string): void {
    const slot = this.slots.get(identity);
    if (slot) clearTimers(slot);
    this.slots.delete(identity);
  }

  /** For /config_dump; `roots`: the CA certificates issued with the current leaf (chain less the leaf). */
  identities(): Array<{ identity: string; notAfter?: string; roots: number; failures: number }> {
    return [...this.slots.values()].map((s) => ({
      identity: s.identity,
      notAfter: s.current?.notAfter.toISOString(),
      roots: Math.max(0, (s.current?.certChainPem.length ?? 1) - 1),
      failures: s.failures,
    }));
  }

  stop(): void {
    this.stopped = true;
    for (const s of this.slots.values()) clearTimers(s);
  }

  private slot(identity: string): Slot {
    let slot = this.slots.get(identity);
    if (!slot) {
      slot = { identity, failures: 0, waiters: 0, expiring: new Set() };
      this.slots.set(identity, slot);
    }
    return slot;
  }

  private request(slot: Slot): Promise<Credential> {
    const store = this.options.store;
    if (store && !slot.looked) {
      slot.looked = true;
      const next = (kept?: Credential) => {
        slot.inflight = undefined;
        // Forgotten while the store was read: hand a kept one to the waiter, hold nothing,
        // and ask the CA for nothing.
        if (this.slots.get(slot.identity) !== slot) {
          if (kept) return kept;
          throw new ZmeshError('ZM_ERR_CERT_MISSING', { identity: slot.identity });
        }
        return kept && this.adopt(kept) ? kept : this.request(slot);
      };
      slot.inflight = store.load(slot.identity).then(next, (e: unknown) => {
        log.warn(
          { identity: slot.identity, err: (e as Error).message },
          'kept credential unreadable: asking the CA',
        );
        return next();
      });
      return slot.inflight;
    }
    const run = <T>(work: () => Promise<T>) =>
      this.options.schedule ? this.options.schedule(slot.identity, work) : this.withSlot(work);
    const attempt = run(async () => {
      const { keyPem, csrPem } = await generateCsr(slot.identity);
      const chain = await this.options.signer.sign(csrPem, slot.identity, this.options.ttlSeconds);
      return this.options.toCredential(slot.identity, keyPem, chain);
    });
    slot.inflight = attempt.then(
      (cred) => {
        slot.inflight = undefined;
        const previous = slot.current;
        slot.current = cred;
        slot.failures = 0;
        this.scheduleRenewal(slot, halfLife(cred, this.now()));
        this.scheduleExpiring(slot, cred);
        log.info({ identity: slot.identity, notAfter: cred.notAfter.toISOString() }, 'certificate issued');
        store
          ?.save(cred)
          .catch((e: unknown) => log.warn({ err: (e as Error).message }, 'keeping a credential failed'));
        this.emit('rotated', slot.identity, cred, previous);
        return cred;
      },
      (e: unknown) => {
        slot.inflight = undefined;
        slot.failures += 1;
        this.failures?.inc();
        const delay = jittered(this.backoff, slot.failures);
        log.warn(
          { identity: slot.identity, err: (e as Error).message, retryMs: delay },
          'certificate request failed',
        );
        // Keep the still-valid certificate; retry unless it was removed meanwhile.
        if (this.slots.get(slot.identity) === slot) this.scheduleRenewal(slot, delay);
        throw new ZmeshError('ZM_ERR_CERT_MISSING', { identity: slot.identity }, { cause: e });
      },
    );
    return slot.inflight;
  }

  private scheduleRenewal(slot: Slot, delayMs: number): void {
    if (this.stopped) return;
    if (slot.timer) clearTimeout(slot.timer);
    slot.timer = guardedTimeout(
      'cert_renewal',
      () => {
        slot.timer = undefined;
        if (this.slots.get(slot.identity) === slot && !slot.inflight) this.request(slot).catch(() => {});
      },
      Math.max(0, delayMs),
    );
    slot.timer.unref();
  }

  private scheduleExpiring(slot: Slot, cred: Credential): void {
    if (this.stopped) return;
    const lifetime = cred.notAfter.getTime() - cred.notBefore.getTime();
    const lead =
      this.options.expiringLeadMs?.(lifetime) ?? Math.min(DEFAULT_MAX_EXPIRING_LEAD_MS, lifetime / 10);
    const timer: NodeJS.Timeout = guardedTimeout(
      'cert_expiring',
      () => {
        slot.expiring.delete(timer);
        if (this.slots.get(slot.identity) !== slot) return;
        log.info(
          { identity: slot.identity, notAfter: cred.notAfter.toISOString(), current: slot.current === cred },
          'certificate expiring: draining its connections',
        );
        this.emit('expiring', slot.identity, cred);
      },
      Math.max(0, cred.notAfter.getTime() - lead - this.now()),
    );
    timer.unref();
    slot.expiring.add(timer);
  }

  private async withSlot<T>(work: () => Promise<T>): Promise<T> {
    if (this.inFlight >= this.maxInFlight) await new Promise<void>((r) => this.queue.push(r));
    this.inFlight += 1;
    try {
      return await work();
    } finally {
      this.inFlight -= 1;
      this.queue.shift()?.();
    }
  }
}

function clearTimers(slot: Slot): void {
  if (slot.timer) clearTimeout(slot.timer);
  for (const t of slot.expiring) clearTimeout(t);
  slot.expiring.clear();
}

/** Milliseconds from now until half of the certificate's lifetime has passed. */
function halfLife(cred: Credential, now: number): number {
  const start = cred.notBefore.getTime();
  return start + (cred.notAfter.getTime() - start) / 2 - now;
}

function jittered(b: { initialMs: number; maxMs: number }, attempt: number): number {
  const base = Math.min(b.maxMs, b.initialMs * 2 ** (attempt - 1));
  return base / 2 + Math.random() * (base / 2);
}
