import { setTimeout as delay } from 'node:timers/promises';
import {
  AccessLog,
  type Credential,
  connectHbone,
  countError,
  FdReserve,
  isZmeshError,
  logger,
  MeshMetrics,
  nofileLimit,
  ok,
  PreauthLimiter,
  type Result,
  registerAcceptPauses,
  registerTaskFailures,
  spiffeIdOf,
  type Workload,
  whenConnected,
} from '@zmesh/shared';
import { Gauge } from 'prom-client';
import { AdminServers } from './admin/admin-servers.js';
import { CapturedPods, workloadOf } from './attribute/captured-pods.js';
import { InboundAuthorizer } from './authz/inbound-authorizer.js';
import { type EnrolledPod, EnrolledPods } from './capture/enrolled-pods.js';
import { connectInNetns, listenInNetns } from './capture/netns-listener.js';
import { PlaintextRedirects } from './capture/plaintext-redirect.js';
import { TransparentConnector } from './capture/transparent-connect.js';
import { type WorkloadHandler, ZdsClient } from './capture/zds-client.js';
import {
  type AppConnector,
  localSourceAppConnector,
  loopbackAppConnector,
  sourceAddressCounter,
} from './forward/app-connector.js';
import { ConnectionTable } from './forward/connection-table.js';
import { CertManager, DEFAULT_MAX_CSRS_IN_FLIGHT } from './identity/cert-manager.js';
import { toCredential } from './identity/credential.js';
import { keptCredentials } from './identity/persisted-keys.js';
import { InboundListener, type ListenTarget } from './inbound/inbound-listener.js';
import { PlaintextInbound } from './inbound/plaintext-inbound.js';
import { ForwardListener } from './outbound/forward-listener.js';
import type { OutboundInputs } from './outbound/outbound-handler.js';
import { TenantAdmission } from './outbound/tenant-admission.js';
import { HbonePool, type PoolKey } from './pool/hbone-pool.js';
import type { ConfigUpdate } from './state/config-target.js';
import type { ForwardListener as ForwardConfig } from './state/local-config.js';
import { HBONE_PORT, ProxyState } from './state/proxy-state.js';
import { FairScheduler } from './tenancy/fair-scheduler.js';
import { RefusalLog } from './tenancy/refusal-log.js';
import { tenantOf } from './tenancy/tenant-of.js';
import type { ZtunnelOptions } from './ztunnel-options.js';

const log = logger('ztunnel');

export const DEFAULT_PORTS = { admin: 15000, metrics: 15020, ready: 15021 };
const DEFAULT_CERT_TTL_SECONDS = 24 * 3600;

/**
 * The node proxy. Holds the active state (swapped whole on every update), the
 * certificates of local workloads, one HBONE listener per local workload, the outbound
 * listeners and the shared HBONE pool.
 */
export class Ztunnel {
  readonly metrics: MeshMetrics;
  readonly certs: CertManager;
  readonly pool: HbonePool;
  readonly authorizer: InboundAuthorizer;
  /** Plaintext from outside the mesh, decided by PeerAuthentication folded into Authorization. */
  readonly plaintext: PlaintextInbound;
  /** Capture mode: the in-pod redirect of plaintext into `plaintext` for workloads not STRICT. */
  private readonly redirects?: PlaintextRedirects;
  readonly tenancy: TenantAdmission;
  readonly accessLog: AccessLog;
  /** Open connections, both directions (admin `/config_dump` `connections`). */
  readonly connections = new ConnectionTable();
  private state = ProxyState.empty();
  private forwardConfigs: readonly ForwardConfig[] = [];
  private readonly inbound = new Map<string, InboundListener>();
  /** One bound for every pod's 15008: the fds it protects are the process's. */
  private readonly preauth: PreauthLimiter;
  /** Refuses new inbound connections while the process is short of fds. */
  private readonly fdReserve: FdReserve | undefined;
  private readonly forwards = new Map<string, ForwardListener>();
  private readonly admin: AdminServers;
  private readonly outbound: OutboundInputs;
  private readonly captured?: EnrolledPods;
  private readonly agent?: ZdsClient;
  private readonly transparent?: TransparentConnector;
  /** The last hop to an app that is not in a captured pod (explicit-proxy mode, or a test's). */
  private readonly hostConnector: AppConnector;
  private reconciling: Promise<void> = Promise.resolve();
  /** Why the configuration is not complete yet (control-plane mode), if it is not. */
  private configIncomplete: () => string | undefined = () => undefined;
  private stopped = false;
  /** Set by drain(): no listener is made again, and stop() leaves the redirect rules. */
  private draining = false;

  constructor(private readonly options: ZtunnelOptions) {
    this.metrics = new MeshMetrics({
      defaultMetrics: options.defaultMetrics ?? true,
      ...(options.registry ? { registry: options.registry } : {}),
    });
    registerTaskFailures(this.metrics.registry);
    registerAcceptPauses(this.metrics.registry);
    const self = this;
    new Gauge({
      name: 'zmesh_drain_connections',
      help: 'While draining (upgrade): connections still open, by side (outbound captured, inbound HBONE, plaintext PERMISSIVE)',
      labelNames: ['side'],
      registers: [this.metrics.registry],
      collect() {
        const open = self.draining ? self.drainingConnections() : { outbound: 0, inbound: 0, plaintext: 0 };
        this.set({ side: 'outbound' }, open.outbound);
        this.set({ side: 'inbound' }, open.inbound);
        this.set({ side: 'plaintext' }, open.plaintext);
      },
    });
    const certQueue = new FairScheduler({
      name: 'cert_requests',
      mode: options.tenancy?.fairness === false ? 'fifo' : 'fair',
      maxInFlight: DEFAULT_MAX_CSRS_IN_FLIGHT,
      registry: this.metrics.registry,
    });
    this.certs = new CertManager({
      schedule: (identity, work) => certQueue.schedule(tenantOfIdentity(identity), 1, work),
      signer: options.signer,
      ttlSeconds: options.certTtlSeconds ?? DEFAULT_CERT_TTL_SECONDS,
      ...(options.certBackoff ? { backoff: options.certBackoff } : {}),
      registry: this.metrics.registry,
      toCredential,
      ...(options.persistedKeys ? { store: keptCredentials(options.persistedKeys, options.bundle) } : {}),
    });
    this.certs.on('rotated', (identity: string, cred: Credential) => this.onRotated(identity, cred));
    this.tenancy = new TenantAdmission(options.tenancy ?? {}, this.metrics.registry);
    this.preauth = new PreauthLimiter({
      ...(options.inboundLimits?.maxPreauthPerSource
        ? { perSource: options.inboundLimits.maxPreauthPerSource }
        : {}),
      ...(options.inboundLimits?.maxPreauth ? { total: options.inboundLimits.maxPreauth } : {}),
      // With workers the total is the node's, counted in the shared buffer.
      ...(this.tenancy.shared ? { shared: this.tenancy.shared.counter('preauth') } : {}),
    });
    const reserve = options.inboundLimits?.fdReserve;
    this.fdReserve = reserve === 0 ? undefined : new FdReserve(reserve === undefined ? {} : { reserve });
    const nofile = nofileLimit();
    log.info(
      { soft: nofile?.soft, hard: nofile?.hard, reserve: this.fdReserve?.reserve ?? 0 },
      'open-file limit (RLIMIT_NOFILE; Node raises soft to hard at start)',
    );
    this.accessLog = new AccessLog({
      registry: this.metrics.registry,
      ...(options.accessLog ? { policy: options.accessLog } : {}),
      ...(options.accessLogSink ? { sink: options.accessLogSink } : {}),
    });
    this.authorizer = new InboundAuthorizer(this.metrics.registry, (uid) => this.state.workload(uid));
    this.plaintext = new PlaintextInbound({
      state: () => this.state,
      connectApp: (uid) => {
        const w = this.state.workload(uid);
        return w ? this.appConnector(w) : this.hostConnector;
      },
      authorizer: this.authorizer,
      accessLog: this.accessLog,
      registry: this.metrics.registry,
    });
    this.pool = new HbonePool({ ...options.pool, metrics: this.metrics, connect: (key) => this.dial(key) });
    this.outbound = {
      state: () => this.state,
      pool: this.pool,
      metrics: this.metrics,
      passthrough: options.passthrough ?? 'deny',
      tenantOf,
      bindSource: true,
      tenancy: this.tenancy,
      refusals: new RefusalLog(undefined, undefined, logger('outbound')),
      accessLog: this.accessLog,
      connections: this.connections,
    };
    if (options.capture) {
      const attribution = new CapturedPods({
        outbound: this.outbound,
        state: () => this.state,
        certificateFailing: (w) => {
          const identity = spiffeIdOf(w);
          return this.certs.get(identity) === undefined && this.certs.failuresOf(identity) > 0;
        },
        registry: this.metrics.registry,
      });
      this.captured = new EnrolledPods({
        bpf: options.capture.bpf,
        onCaptured: (pod, socket, destination) => attribution.accept(pod, socket, destination),
        onChange: () => void this.queueReconcile(),
        registry: this.metrics.registry,
        sendBufferBytes: this.tenancy.appSendBufferBytes,
      });
      this.redirects = new PlaintextRedirects((uid, socket, dst) => this.plaintext.serve(uid, socket, dst));
      if (!options.capture.external)
        this.agent = new ZdsClient(this.captured, {
          path: options.capture.zdsSocket,
          cgroupRoot: options.capture.cgroupRoot,
          registry: this.metrics.registry,
        });
      this.transparent = new TransparentConnector(this.metrics.registry);
    }
    this.hostConnector =
      options.connectApp ??
      (this.transparent
        ? loopbackAppConnector
        : localSourceAppConnector(sourceAddressCounter(this.metrics.registry)));
    this.admin = new AdminServers({
      host: options.address,
      ports: options.ports ?? DEFAULT_PORTS,
      registry: this.metrics.registry,
      configDump: () => this.configDump(),
      readiness: () => this.readiness(),
      quit: () => void this.stop(),
    });
  }

  async start(): Promise<void> {
    await this.admin.start();
    log.info({ node: this.options.node, address: this.options.address }, 'ztunnel started');
  }

  /**
   * Capture mode: connects to the node agent, which hands over the node's pods. Called once
   * the config at hand (the local file, the on-disk snapshot) is applied: a pod enrolled
   * earlier has its listener up with no workload to attribute to, and during an upgrade
   * the kernel hands that listener connections the predecessor would have carried.
   */
  startEnrolment(): void {
    this.agent?.start();
  }

  /**
   * Swaps in a new configuration and reconciles listeners; resolves once listeners match
   * it. An invalid policy set refuses the whole update (every reason returned) and the
   * active configuration stays as it was.
   */
  async applyConfig(update: ConfigUpdate): Promise<Result<number>> {
    if (update.policies) {
      const applied = this.authorizer.replacePolicies(update.policies);
      if (!applied.ok) {
        log.warn({ reasons: applied.error }, 'config refused');
        return applied;
      }
    }
    this.state = new ProxyState({
      workloads: update.workloads,
      services: update.services,
      version: this.state.version + 1,
    });
    if (update.forwards) this.forwardConfigs = update.forwards;
    // A workload change (its selector policies, its removal) can deny a live connection too.
    setImmediate(() => this.authorizer.reevaluate());
    await this.queueReconcile();
    return ok(this.state.version);
  }

  /** Reconciles listeners with state and enrollment, one pass at a time. */
  private queueReconcile(): Promise<void> {
    this.reconciling = this.reconciling
      .then(() => this.reconcile())
      .catch((e: unknown) => {
        log.error({ err: (e as Error).message }, 'reconcile failed');
      });
    return this.reconciling;
  }

  /** Workloads this proxy serves: on this node, speaking HBONE, in capture mode enrolled, and on a worker its own. */
  localWorkloads(): Workload[] {
    const serves = this.options.serves;
    return this.state
      .localWorkloads(this.options.node)
      .filter(
        (w) =>
          w.tunnelProtocol === 'HBONE' &&
          (!this.captured || this.captured.get(w.uid)) &&
          (!serves || serves(w.uid)),
      );
  }

  /** Capture mode with `capture.external`: where the main thread's enrolments of this worker's pods go. */
  enrolment(): WorkloadHandler | undefined {
    return this.captured;
  }

  /** Reconciles listeners again (a worker's `serves` changed). */
  reshard(): Promise<void> {
    return this.queueReconcile();
  }

  /** Control-plane mode: readiness also waits for a complete snapshot (synced once, or from disk). */
  setConfigReadiness(incomplete: () => string | undefined): void {
    this.configIncomplete = incomplete;
  }

  /** docs/design.md §5: ready = a complete snapshot and a valid certificate for every enrolled workload. */
  readiness(): { ready: boolean; reasons: string[] } {
    const incomplete = this.configIncomplete();
    const reasons = incomplete ? [incomplete] : [];
    const pendingConfig = (this.captured?.list() ?? []).filter((pod) => !workloadOf(this.state, pod));
    // Named as Istio names the workload (`Kubernetes//Pod/<ns>/<name>`) when the agent sent its names.
    reasons.push(
      ...pendingConfig.map((pod) => `${pod.workloadUids.at(-1) ?? pod.uid}: enrolled, no configuration yet`),
    );
    reasons.push(
      ...this.localWorkloads().flatMap((w) => {
        const failures = this.certs.failuresOf(spiffeIdOf(w));
        const why = failures > 0 ? ` (${failures} requests failed: CA unreachable?)` : '';
        if (!this.certs.get(spiffeIdOf(w))) return [`${w.uid}: no valid certificate${why}`];
        if (!this.inbound.has(w.uid)) return [`${w.uid}: inbound listener not up`];
        return [];
      }),
    );
    return { ready: reasons.length === 0, reasons };
  }

  configDump(): unknown {
    return {
      node: this.options.node,
      // Which process answered: during an upgrade's overlap two share the admin port.
      pid: process.pid,
      version: this.state.version,
      workloads: [...this.state.workloads()],
      services: [...this.state.services()],
      local: this.localWorkloads().map((w) => ({
        uid: w.uid,
        identity: spiffeIdOf(w),
        inbound: this.inbound.has(w.uid),
        status: this.certs.get(spiffeIdOf(w)) && this.inbound.has(w.uid) ? 'ready' : 'pending',
      })),
      enrolled: this.captured?.uids(),
      plaintextRedirects: this.redirects?.uids(),
      forwards: this.forwardConfigs,
      certificates: this.certs.identities(),
      policies: { version: this.authorizer.store.version, items: this.authorizer.store.list() },
      pool: this.pool.stats(),
      tenants: this.tenancy.byteStats(),
      connections: this.connections.dump(),
    };
  }

  /**
   * Graceful exit for an upgrade (docs/upgrade.md). A successor ztunnel already listens on
   * the pods' ports (SO_REUSEPORT) and holds the pods (the node agent sends Adds to the
   * newest ztunnel). This one leaves the agent, closes its pods' listeners (the kernel sends
   * new connections to the successor's), sends GOAWAY on its inbound HBONE sessions, keeps
   * open connections until they end or `graceMs` passes, then stops. Capture and redirect
   * rules stay: the successor relies on them.
   */
  async drain(graceMs: number): Promise<void> {
    if (this.stopped || this.draining) return;
    this.draining = true;
    this.agent?.close();
    await this.admin.handOver();
    this.captured?.stopAccepting();
    this.redirects?.stopAccepting();
    const inbound = Promise.all([...this.inbound.values()].map((l) => l.drain(graceMs)));
    const started = Date.now();
    log.info({ node: this.options.node, graceMs, ...this.drainingConnections() }, 'draining');
    const deadline = started + graceMs;
    let lastLog = started;
    for (;;) {
      const open = this.drainingConnections();
      const now = Date.now();
      if (open.outbound + open.inbound + open.plaintext === 0 || now >= deadline) {
        const fields = { node: this.options.node, ...open, ms: now - started };
        if (now >= deadline) log.warn(fields, 'drain grace passed: closing the connections left');
        else log.info(fields, 'drained: last connection closed');
        break;
      }
      if (now - lastLog >= 10_000) {
        lastLog = now;
        log.info({ node: this.options.node, ...open }, 'draining');
      }
      await delay(Math.min(100, deadline - now));
    }
    await inbound;
    await this.stop();
  }

  /** Connections a drain waits for: captured outbound, HBONE inbound and PERMISSIVE plaintext. */
  private drainingConnections(): { outbound: number; inbound: number; plaintext: number } {
    let inbound = 0;
    for (const l of this.inbound.values()) inbound += l.connectionCount();
    return {
      outbound: this.captured?.liveConnections() ?? 0,
      inbound,
      plaintext: this.plaintext.liveConnections(),
    };
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.certs.stop();
    this.agent?.close();
    await this.captured?.close();
    // After a drain the successor serves the pods and relies on the redirect rules.
    if (this.draining) this.redirects?.stopAccepting();
    else await this.redirects?.close();
    this.plaintext.closeAll();
    this.pool.close();
    this.tenancy.close();
    await Promise.all([...this.forwards.values()].map((f) => f.close()));
    await Promise.all([...this.inbound.values()].map((l) => l.close()));
    await this.admin.stop();
    log.info({ node: this.options.node }, 'ztunnel stopped');
  }

  private async reconcile(): Promise<void> {
    if (this.stopped || this.draining) return;
    const local = new Map(this.localWorkloads().map((w) => [w.uid, w]));
    for (const [uid, listener] of this.inbound) {
      // A workload whose addresses or identity changed gets a new listener, not the stale one.
      if (local.has(uid) && boundFor.get(listener) === inboundKey(local.get(uid)!)) continue;
      this.inbound.delete(uid);
      await listener.drain();
    }
    for (const w of local.values()) {
      const cred = this.certs.get(spiffeIdOf(w));
      if (cred) await this.ensureInbound(w, cred);
      else this.certs.prefetch(spiffeIdOf(w));
    }
    await this.redirects?.reconcile(
      [...local.values()].flatMap((w) => {
        const pod = this.captured?.get(w.uid);
        if (!pod || !this.inbound.has(w.uid) || !this.authorizer.acceptsPlaintext(w)) return [];
        return [{ uid: w.uid, netns: pod.netns, addresses: w.addresses }];
      }),
    );
    await this.reconcileForwards();
  }

  private async ensureInbound(w: Workload, cred: Credential): Promise<void> {
    if (this.inbound.has(w.uid) || this.stopped || this.draining) return;
    const listener = new InboundListener({
      workloadUid: w.uid,
      credential: cred,
      bundle: this.options.bundle,
      state: () => this.state,
      connectApp: this.appConnector(w),
      metrics: this.metrics,
      authorizer: this.authorizer,
      accessLog: this.accessLog,
      connections: this.connections,
      ...(this.tenancy.inboundCopy ? { copy: this.tenancy.inboundCopy } : {}),
      streamWindows: this.tenancy.streamWindows,
      preauth: this.preauth,
      ...(this.fdReserve ? { gate: this.fdReserve } : {}),
      ...(this.options.inboundLimits?.handshakeTimeoutMs
        ? { handshakeTimeoutMs: this.options.inboundLimits.handshakeTimeoutMs }
        : {}),
      ...(this.options.inboundLimits?.pingIntervalMs
        ? {
            keepalive: {
              intervalMs: this.options.inboundLimits.pingIntervalMs,
              timeoutMs: 2 * this.options.inboundLimits.pingIntervalMs,
            },
          }
        : {}),
    });
    this.inbound.set(w.uid, listener);
    boundFor.set(listener, inboundKey(w));
    try {
      await listener.listen(this.inboundTargets(w));
    } catch (e) {
      this.inbound.delete(w.uid);
      await listener.close();
      this.listenFailed(e, { workload: w.uid }, 'inbound listener failed');
    }
  }

  private async reconcileForwards(): Promise<void> {
    // Only this node's workloads get forward listeners: the file may describe the whole mesh.
    const local = new Set(this.localWorkloads().map((w) => w.uid));
    const mine = this.forwardConfigs.filter((f) => local.has(f.workloadUid));
    const wanted = new Map(mine.map((f) => [forwardKey(f), f]));
    for (const [key, listener] of this.forwards) {
      if (wanted.has(key)) continue;
      this.forwards.delete(key);
      await listener.close();
    }
    for (const [key, f] of wanted) {
      if (this.forwards.has(key)) continue;
      const listener = new ForwardListener(f, this.outbound);
      this.forwards.set(key, listener);
      try {
        await listener.listen();
      } catch (e) {
        this.forwards.delete(key);
        this.listenFailed(e, { workload: f.workloadUid }, 'forward listener failed');
      }
    }
  }

  /**
   * A workload's listener that cannot bind leaves the proxy serving the others: the
   * failure is logged with its code and counted. Without its inbound listener the
   * workload is not ready, and readiness says so.
   */
  private listenFailed(e: unknown, fields: Record<string, unknown>, msg: string): void {
    if (isZmeshError(e)) {
      countError(this.metrics, e);
      log.error({ ...fields, code: e.code, ...e.context, err: e.message }, msg);
    } else log.error({ ...fields, err: (e as Error).message }, msg);
  }

  private onRotated(identity: string, cred: Credential): void {
    let missing = false;
    for (const w of this.localWorkloads()) {
      if (spiffeIdOf(w) !== identity) continue;
      const listener = this.inbound.get(w.uid);
      if (listener) listener.updateCredential(cred);
      else missing = true;
    }
    // A first certificate: a reconcile pass makes the listener and what hangs on it (the
    // PERMISSIVE redirect), which a bare listener here missed when config came first.
    if (missing) void this.queueReconcile();
  }

  private async dial(key: PoolKey) {
    const credential = await this.certs.fetch(key.sourceIdentity);
    const [host, port] = splitHostPort(key.destinationAddress);
    const pod = key.sourceAddress ? this.enrolledPodAt(key.sourceAddress) : undefined;
    return connectHbone({
      host,
      port,
      credential,
      bundle: this.options.bundle,
      expectedIdentities: key.destinationIdentity.split(','),
      streamWindows: this.tenancy.streamWindows,
      // Capture mode: the TCP socket is made inside the source pod, so the tunnel leaves
      // from the pod's own address; explicit mode binds the workload's loopback address.
      ...(pod
        ? { createSocket: () => connectInNetns(pod.netns, host, port) }
        : key.sourceAddress && !this.captured
          ? { localAddress: key.sourceAddress }
          : {}),
    });
  }

  private enrolledPodAt(address: string): EnrolledPod | undefined {
    const w = this.state.workloadByIp(address);
    return w ? this.captured?.get(w.uid) : undefined;
  }

  /** 15008 on every address of the workload: in the pod's netns when captured. */
  private inboundTargets(w: Workload): ListenTarget[] {
    const pod = this.captured?.get(w.uid);
    if (!pod) return w.addresses.map((host) => ({ host, port: HBONE_PORT }));
    return w.addresses.map((host) => ({
      fd: listenInNetns(pod.netns, host, HBONE_PORT, { freebind: true }),
    }));
  }

  /** The last hop to the app: inside the pod when captured, from the original client's address. */
  private appConnector(w: Workload): AppConnector {
    const pod = this.captured?.get(w.uid);
    const transparent = this.transparent;
    if (!pod || !transparent) return this.hostConnector;
    const opts = { sendBufferBytes: this.tenancy.appSendBufferBytes };
    return (_w, host, port, source) => whenConnected(transparent.connect(pod, host, port, source, opts));
  }
}

/** What an inbound listener was made for: the identity it presents and the addresses it binds. */
const boundFor = new WeakMap<InboundListener, string>();
const inboundKey = (w: Workload) => `${spiffeIdOf(w)}|${w.addresses.join(',')}`;

function forwardKey(f: ForwardConfig): string {
  return `${f.workloadUid}|${f.listen.host}:${f.listen.port}|${f.destination.host}:${f.destination.port}`;
}

function splitHostPort(address: string): [string, number] {
  const i = address.lastIndexOf(':');
  return [address.slice(0, i).replace(/^\[|\]$/g, ''), Number(address.slice(i + 1))];
}

/** The tenant a certificate request is charged to: the namespace in the SPIFFE ID. */
function tenantOfIdentity(identity: string): string {
  return /\/ns\/([^/]+)\//.exec(identity)?.[1] ?? 'unknown';
}
