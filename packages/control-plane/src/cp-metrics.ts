import { EVENT_LOOP_SAMPLE_MS } from '@zmesh/shared';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { StoreBackend, StoreObserver } from './store/state-store.js';

/**
 * The control plane's Prometheus metrics (`GET /metrics` on the admin endpoint). One
 * registry per control plane, as each proxy keeps its own (MeshMetrics), so several control
 * planes in one test process count apart. Labels are bounded: a source kind, never a name.
 */
export class ControlPlaneMetrics {
  readonly registry = new Registry();
  /** Applies, deletes and reloads refused by admission or parsing, by where they came from. */
  readonly configRejections = new Counter({
    name: 'zmesh_cp_config_rejections_total',
    help: 'Config changes refused whole (admission, parse); the running config is unchanged',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });
  readonly configChanges = new Counter({
    name: 'zmesh_cp_config_changes_total',
    help: 'Config changes committed (apply, delete, reload, ns l7)',
    registers: [this.registry],
  });
  readonly configGeneration = new Gauge({
    name: 'zmesh_cp_config_generation',
    help: 'Generation of the config being served',
    registers: [this.registry],
  });
  /** Set by the control plane on every scrape and status change. */
  readonly waypointsNotReady = new Gauge({
    name: 'zmesh_cp_waypoints_not_ready',
    help: 'Waypoints that workloads or services use but no connected waypoint proxy has ACKed (their L7 traffic fails closed)',
    registers: [this.registry],
  });
  /** Set with the status above: the transition hold (control-plane.ts `#serve`). */
  readonly waypointUsersHeld = new Gauge({
    name: 'zmesh_cp_waypoint_users_held',
    help: 'Workloads and services newly bound to a waypoint that no connected waypoint proxy has ACKed, kept on their previous path until one does',
    registers: [this.registry],
  });
  readonly waypointBindingsUnreadable = new Counter({
    name: 'zmesh_cp_waypoint_bindings_unreadable_total',
    help: 'Stored last-served waypoint bindings read that are not a waypoint reference (a store written by something else), each distinct text once; their objects are served as compiled, never as direct, and that records a readable binding',
    registers: [this.registry],
  });
  readonly connectedProxies = new Gauge({
    name: 'zmesh_cp_connected_proxies',
    help: 'Proxies (ztunnels, waypoints) with an open xDS stream',
    registers: [this.registry],
  });
  readonly adminUnauthorized = new Counter({
    name: 'zmesh_cp_admin_unauthorized_total',
    help: 'Admin requests refused for a missing or wrong bearer token',
    registers: [this.registry],
  });
  /** Filled at scrape from the xDS server's counts (ProxyStatusRegistry.counts). */
  readonly xdsPushes = new Counter({
    name: 'zmesh_cp_xds_pushes_total',
    help: 'Delta xDS responses sent, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly xdsAcks = new Counter({
    name: 'zmesh_cp_xds_acks_total',
    help: 'Responses proxies ACKed, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly xdsNacks = new Counter({
    name: 'zmesh_cp_xds_nacks_total',
    help: 'Responses proxies NACKed (rejected), by type; proxy-status has the reasons',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly csrs = new Counter({
    name: 'zmesh_cp_csrs_total',
    help: 'Workload certificate signing requests that reached the signer, by outcome (signed, failed)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  /**
   * Every state-store operation (store/state-store.ts StoreOp) by backend: from a local SQLite
   * commit (sub-millisecond to a few ms with fsync) to an etcd call that times out (3 s).
   */
  readonly storeSeconds = new Histogram({
    name: 'zmesh_cp_store_operation_seconds',
    help: 'State-store operations (load, commit, read-meta, write-meta, watch-apply) by backend and outcome',
    labelNames: ['backend', 'op', 'outcome'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly csrRefusals = new Counter({
    name: 'zmesh_cp_csr_refusals_total',
    help: 'Workload certificate requests refused before signing (ZM_ERR_CA_REFUSED at the proxy), by why: unauthenticated, not-on-node (the node authorizer), not-own-identity (a workload token of its own), invalid-request',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly ready = new Gauge({
    name: 'zmesh_cp_ready',
    help: '1 when the control plane can serve (config loaded, store answering), else 0',
    registers: [this.registry],
  });

  /** Controller mode: objects of the API that admission keeps out (each has an Accepted=False condition where its kind has status). */
  readonly kubernetesRefused = new Gauge({
    name: 'zmesh_cp_kubernetes_refused_objects',
    help: 'Kubernetes objects refused by admission and left out of the served config (controller mode)',
    registers: [this.registry],
  });
  /** Controller mode: 1 on the replica holding the Lease (the one that writes), else 0. */
  readonly kubernetesLeader = new Gauge({
    name: 'zmesh_cp_kubernetes_leader',
    help: '1 when this replica holds the leader Lease and writes waypoint objects and status (controller mode)',
    registers: [this.registry],
  });
  /** Controller mode: API writes that failed (not counting 409s that a retry resolved), by what was written. */
  readonly kubernetesWriteFailures = new Counter({
    name: 'zmesh_cp_kubernetes_write_failures_total',
    help: 'Writes to the Kubernetes API that failed, by kind of write (waypoint, status)',
    labelNames: ['write'] as const,
    registers: [this.registry],
  });

  /** What a store reports its operations to (`StateStore.observe`), labelled with its backend. */
  storeObserver(backend: StoreBackend): StoreObserver {
    return (op, seconds, failed) =>
      this.storeSeconds.observe({ backend, op, outcome: failed ? 'error' : 'ok' }, seconds);
  }

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics)
      collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  }
}
