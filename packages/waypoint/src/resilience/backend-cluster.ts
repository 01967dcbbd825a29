import type { Endpoint } from '../config/config-view.js';
import type { BackendPolicy } from '../config/waypoint-config.js';
import type { Clock } from './clock.js';
import { OutlierDetector } from './outlier-detector.js';
import { RetryBudget } from './retry-budget.js';

export type Admission =
  | { ok: true; release: () => void }
  | { ok: false; reason: 'max_requests' | 'max_pending' };

/**
 * Per-backend-service state that outlives config swaps: circuit-breaker counters (Envoy's
 * max_connections / max_pending_requests / max_requests), the retry budget, outlier
 * detection and the load balancer's cursor and per-host active counts.
 */
export class BackendCluster {
  readonly retryBudget = new RetryBudget();
  readonly outlier: OutlierDetector;
  /** `namespace/hostname` of the service, or `workload/<uid>` for a pod addressed directly. */
  readonly name: string;
  #policy: BackendPolicy;
  #activeRequests = 0;
  #pending = 0;
  #connections = 0;
  #cursor = 0;
  readonly #activePerHost = new Map<string, number>();

  constructor(policy: BackendPolicy, clock: Clock, onEject?: (host: string, ejected: boolean) => void) {
    this.name = policy.service;
    this.#policy = policy;
    this.outlier = new OutlierDetector(policy.outlier, clock, onEject);
  }

  setPolicy(policy: BackendPolicy): void {
    this.#policy = policy;
    this.outlier.setPolicy(policy.outlier);
  }

  get policy(): BackendPolicy {
    return this.#policy;
  }

  /** One attempt's admission: counted against max_requests until release(). */
  admitRequest(): Admission {
    if (this.#activeRequests >= this.#policy.circuitBreaker.maxRequests)
      return { ok: false, reason: 'max_requests' };
    this.#activeRequests++;
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        this.#activeRequests--;
      },
    };
  }

  /**
   * Envoy's max_pending_requests, for this design: requests waiting while a new upstream
   * connection (HBONE tunnel) is set up for them. Beyond it they overflow rather than queue:
   * upstream connections belong to one downstream connection, so there is no shared pool
   * whose free connection a queued request could wait for.
   */
  admitPending(): Admission {
    if (this.#pending >= this.#policy.circuitBreaker.maxPendingRequests)
      return { ok: false, reason: 'max_pending' };
    this.#pending++;
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        this.#pending--;
      },
    };
  }

  /** Envoy's max_connections: a new upstream connection beyond it is refused (overflow). */
  tryOpenConnection(): boolean {
    if (this.#connections >= this.#policy.circuitBreaker.maxConnections) return false;
    this.#connections++;
    return true;
  }

  connectionClosed(): void {
    this.#connections--;
  }

  get pendingLimit(): number {
    return this.#policy.circuitBreaker.maxPendingRequests;
  }

  get connectionLimit(): number {
    return this.#policy.circuitBreaker.maxConnections;
  }

  get counts(): { activeRequests: number; pending: number; connections: number } {
    return { activeRequests: this.#activeRequests, pending: this.#pending, connections: this.#connections };
  }

  /** L7 load balancing over endpoints not ejected; `exclude` avoids the host a retry just failed on. */
  pick(endpoints: readonly Endpoint[], exclude?: string): Endpoint | undefined {
    let hosts = this.outlier.available(endpoints);
    if (exclude !== undefined && hosts.length > 1) hosts = hosts.filter((h) => h.key !== exclude);
    if (hosts.length === 0) return undefined;
    if (this.#policy.loadBalancer === 'LEAST_REQUEST') return this.#leastRequest(hosts);
    const h = hosts[this.#cursor % hosts.length]!;
    this.#cursor = (this.#cursor + 1) % 1_000_000_007;
    return h;
  }

  hostStarted(key: string): void {
    this.#activePerHost.set(key, (this.#activePerHost.get(key) ?? 0) + 1);
  }

  hostEnded(key: string): void {
    const n = (this.#activePerHost.get(key) ?? 1) - 1;
    if (n <= 0) this.#activePerHost.delete(key);
    else this.#activePerHost.set(key, n);
  }

  /** Envoy's least-request with power of two choices: two random hosts, the less busy one. */
  #leastRequest(hosts: readonly Endpoint[]): Endpoint {
    if (hosts.length === 1) return hosts[0]!;
    const a = hosts[Math.floor(Math.random() * hosts.length)]!;
    const b = hosts[Math.floor(Math.random() * hosts.length)]!;
    return (this.#activePerHost.get(a.key) ?? 0) <= (this.#activePerHost.get(b.key) ?? 0) ? a : b;
  }
}
