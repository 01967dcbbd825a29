import { randomBytes } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import {
  ADDRESS_TYPE_URL,
  type Authorization,
  convertAuthorizationPolicy,
  logger,
  type Result,
  WAYPOINT_CONFIG_TYPE_URL,
  ZmeshError,
} from '@zmesh/shared';
import { admitWaypointConfigs, type WaypointValidator } from './admission.js';
import type { SignCsr } from './ca-service.js';
import { type CompiledConfig, Compiler } from './compiler.js';
import { ConfigStore, type StoreUnavailable, type StoreView } from './config-store.js';
import { ControlPlaneMetrics } from './cp-metrics.js';
import { EventLog } from './events.js';
import { explainPod, type PodExplanation } from './explain-pod.js';
import { isWaypointClass, type StoreObject, USE_WAYPOINT_LABEL, WAYPOINT_CLASS } from './k8s-objects.js';
import { type RolloutReport, setNamespaceWaypoint, waitForAcks } from './namespace-waypoint.js';
import { NodeTokens } from './node-tokens.js';
import type { ProxyReport } from './proxy-status.js';
import { type RouteStatus, routeStatuses } from './route-status.js';
import {
  bindingsChange,
  MemoryStateStore,
  metaOrCreate,
  type SharedStateStore,
  type StateStore,
} from './store/state-store.js';
import { type HeldUser, WaypointHold, waypointName } from './waypoint-hold.js';
import { XdsServer } from './xds-server.js';

export interface ControlPlaneOptions {
  /** Directory of YAML config; reloaded on change when `watch` is set. */
  configDir?: string;
  watch?: boolean;
  trustDomain: string;
  clusterDomain?: string;
  signCsr?: SignCsr;
  /** HMAC key for node tokens; default: the state store's (created there on first start). */
  tokenKey?: Buffer;
  /**
   * Applied objects, the generation, the served waypoint bindings, xDS version counters and
   * the node-token key (store/). Default: in memory, nothing survives the process.
   */
  state?: StateStore;
  /**
   * A store shared with other replicas (etcd) instead of `state`: every replica serves what
   * any of them committed, and xDS versions are the store's generation (its revision), so
   * they agree across replicas. The node-token key then comes from `tokenKey`.
   */
  shared?: SharedStateStore;
  /** Default: Istio's conversion (`convertAuthorizationPolicy`); waypoint-targeted policies are dropped. */
  convertPolicy?: (raw: Record<string, unknown>) => Authorization | undefined;
  maxCertTtlSeconds?: number;
  /**
   * The waypoint's own check of its config (`decodeWaypointConfig`, wired by the daemon):
   * given, admission compiles each change and refuses what a waypoint would NACK.
   */
  validateWaypointConfig?: WaypointValidator;
  /** Process metrics (CPU, memory, event loop) on /metrics too: the daemon sets it, tests need not. */
  defaultMetrics?: boolean;
}

/** A waypoint Gateway, who uses it, and whether a connected waypoint proxy holds its config. */
export interface WaypointStatus {
  waypoint: string;
  /** Workloads and services that send their traffic through it. */
  users: number;
  /** Users newly bound to it while it is not ready, kept on their previous path until it ACKs. */
  held: number;
  /** Connected waypoint proxies that ACKed its config (any version). */
  ackedBy: string[];
  ready: boolean;
}

/** An object the control plane holds but does not serve, wholly or in part, and why (proxy-status). */
export interface NotServed {
  /** `Kind/namespace/name`. */
  object: string;
  reason: string;
}

/** How often waypoint readiness is re-evaluated for the gauge and the log line. */
const WAYPOINT_CHECK_MS = 1000;

const log = logger('control-plane');

/** The control plane: config store → compiler → xDS/CA server, wired together. */
export class ControlPlane {
  readonly store: ConfigStore;
  readonly server: XdsServer;
  readonly tokens: NodeTokens;
  readonly state: StateStore;
  readonly metrics: ControlPlaneMetrics;
  /** Refused changes and waypoint bindings, for `zmesh describe` (GET /events). */
  readonly events = new EventLog();
  readonly #compiler: Compiler;
  /** The compiler's output: what the config asks for. */
  #compiled: CompiledConfig | undefined;
  /** What is served: `#compiled` with the transition hold applied (waypoint-hold.ts). */
  #served: CompiledConfig | undefined;
  readonly #hold = new WaypointHold(() => this.metrics.waypointBindingsUnreadable.inc());
  #generation = 0;
  #reservePending = false;
  /** The last compile, by the objects map it compiled (views share theirs). */
  #compiledFor: { objects: ReadonlyMap<string, StoreObject>; compiled: CompiledConfig } | undefined;
  /** Set once the first load committed: before it, the control plane cannot serve. */
  #loaded = false;
  #listening = false;
  readonly #readinessChecks: Array<() => string | undefined> = [];
  #notReadyWaypoints = new Set<string>();
  #waypointTimer: NodeJS.Timeout | undefined;
  readonly #shared: SharedStateStore | undefined;
  /** What the ztunnel conversion of each policy (by its raw object) did not serve as written. */
  readonly #conversionNotes = new WeakMap<object, string[]>();
  readonly #notServedSources: Array<() => NotServed[]> = [];
  /**
   * Set in Kubernetes mode (kubernetes/kube-controller.ts): `ns l7` labels the Namespace
   * through the API server, and the change reaches the store through the informer.
   */
  namespaceLabeler: ((namespace: string, waypoint: string | undefined) => Promise<Result<void>>) | undefined;

  /** Throws ZM_ERR_STATE_STORE when the state store cannot be read. */
  constructor(opts: ControlPlaneOptions) {
    // Replicas must share the key, or a token minted by one is refused by the others.
    if (opts.shared && opts.tokenKey === undefined)
      throw new ZmeshError('ZM_ERR_STATE_STORE', {
        dir: opts.shared.location,
        reason: 'a shared store needs the shared node-token key (tokenKey: await sharedNodeTokenKey(store))',
      });
    this.state = opts.state ?? new MemoryStateStore();
    // Before the config store loads, so the load is timed too.
    this.metrics = new ControlPlaneMetrics({ defaultMetrics: opts.defaultMetrics ?? false });
    this.state.observe(this.metrics.storeObserver(this.state.backend));
    opts.shared?.observe(this.metrics.storeObserver(opts.shared.backend));
    const validate = opts.validateWaypointConfig;
    this.#shared = opts.shared;
    this.store = new ConfigStore({
      ...(opts.shared ? { shared: opts.shared } : { state: this.state }),
      ...(opts.configDir === undefined ? {} : { dir: opts.configDir }),
      ...(validate
        ? {
            admit: (objects, originOf) =>
              admitWaypointConfigs(this.#compile(objects).waypoints ?? [], validate, originOf),
          }
        : {}),
      // What serving the change will record, committed with it (waypoint-hold.ts).
      bindings: (objects, last) => this.#hold.decide(this.#compile(objects), this.#ready(), last).bindings,
    });
    this.tokens = new NodeTokens(opts.tokenKey ?? nodeTokenKey(this.state));
    const sign = opts.signCsr;
    this.server = new XdsServer({
      tokens: this.tokens,
      ...(sign
        ? {
            signCsr: async (csr, o) => {
              try {
                const chain = await sign(csr, o);
                this.metrics.csrs.inc({ outcome: 'signed' });
                return chain;
              } catch (e) {
                this.metrics.csrs.inc({ outcome: 'failed' });
                throw e;
              }
            },
          }
        : {}),
      ...(opts.maxCertTtlSeconds === undefined ? {} : { maxCertTtlSeconds: opts.maxCertTtlSeconds }),
      onCsrRefused: (reason) => this.metrics.csrRefusals.inc({ reason }),
    });
    this.#compiler = new Compiler({
      trustDomain: opts.trustDomain,
      ...(opts.clusterDomain ? { clusterDomain: opts.clusterDomain } : {}),
      convertPolicy:
        opts.convertPolicy ??
        ((raw) => convertForZtunnel(raw, (notes) => this.#conversionNotes.set(raw, notes))),
    });
    if (!opts.shared) this.server.cache.seedVersions(storedVersions(this.state));
    this.store.on('change', (view: StoreView) => {
      this.#compiled = this.#compile(view.objects);
      this.#generation = view.generation;
      this.#serve();
      this.metrics.configChanges.inc();
      this.metrics.configGeneration.set(view.generation);
    });
    // A waypoint's ACK may make it ready: serve the bindings held for it (after the ACK's turn).
    this.server.proxies.onAck = (typeUrl) => {
      if (typeUrl !== WAYPOINT_CONFIG_TYPE_URL || this.#hold.held.length === 0 || this.#reservePending)
        return;
      this.#reservePending = true;
      setImmediate(() => {
        this.#reservePending = false;
        this.#releaseIfReady();
      });
    };
    this.store.on('rejected', (reasons: string[], source: string) => {
      this.metrics.configRejections.inc({ source: source ?? 'apply' });
      this.events.refused(reasons, source ?? 'apply');
    });
    if (opts.watch) this.store.watch();
  }

  /** The compiled config of `objects`: admission, the bindings and serving compile each change once. */
  #compile(objects: ReadonlyMap<string, StoreObject>): CompiledConfig {
    if (this.#compiledFor?.objects !== objects)
      this.#compiledFor = { objects, compiled: this.#compiler.compile({ generation: -1, objects }) };
    return this.#compiledFor.compiled;
  }

  /** Whether a connected waypoint (of this replica) has ACKed the config of each waypoint, now. */
  #ready(): (waypoint: string) => boolean {
    const ackers = this.server.proxies.ackersOf(this.server.cache, WAYPOINT_CONFIG_TYPE_URL);
    return (w) => (ackers.get(w)?.any.length ?? 0) > 0;
  }

  /**
   * Serves the compiled config with the transition hold applied, against the stored
   * last-served bindings and the waypoints' readiness now; records binding events from what
   * is served. Bindings that serving would move (a held object whose waypoint ACKed) are
   * written to the store first: until they are, what is served is what the store says
   * (nothing released), so no replica and no restart ever finds a waypoint it used missing.
   */
  #serve(): void {
    const compiled = this.#compiled;
    if (compiled === undefined) return;
    const stored = this.store.bindings();
    let decision = this.#hold.decide(compiled, this.#ready(), stored);
    const change = bindingsChange(stored, decision.bindings, false);
    if (change.put.size > 0 && this.store.recordBindings(change) !== 'recorded')
      decision = this.#hold.decide(compiled, () => false, stored);
    this.#hold.served(decision);
    const before = this.#served;
    this.#served = decision.config;
    this.events.compiled(before, this.#served);
    if (this.#shared) this.server.setConfig(this.#served, this.#generation);
    else {
      this.server.setConfig(this.#served);
      keepVersions(this.state, this.server.cache.versions());
    }
    this.waypointStatus();
  }

  /** Re-serves when a waypoint that users are held for has become ready (also: a record to retry). */
  #releaseIfReady(): void {
    if (this.#hold.held.length === 0) return;
    const ready = this.#ready();
    if (this.#hold.held.some((h) => ready(h.waypoint))) this.#serve();
  }

  /** Users held back from a waypoint that is not ready (proxy-status, GET /waypoints/held). */
  heldUsers(): readonly HeldUser[] {
    return this.#hold.held;
  }

  /** Refreshes the gauges that are read from state rather than counted. */
  collectMetrics(): void {
    this.waypointStatus();
    this.metrics.connectedProxies.set(this.server.proxies.connectedCount());
    for (const [typeUrl, c] of this.server.proxies.counts) {
      const type = typeUrl.slice(typeUrl.lastIndexOf('.') + 1);
      for (const [counter, n] of [
        [this.metrics.xdsPushes, c.pushes],
        [this.metrics.xdsAcks, c.acks],
        [this.metrics.xdsNacks, c.nacks],
      ] as const) {
        counter.remove({ type });
        if (n > 0) counter.inc({ type }, n);
      }
    }
    this.metrics.ready.set(this.readiness().ready ? 1 : 0);
  }

  /**
   * Whether the control plane can serve: the initial config loaded and committed (a store
   * that fails to load leaves it false). Proxies keep their last-known-good config
   * regardless; this is for the operator and the orchestrator, not a kill switch.
   */
  readiness(): { ready: boolean; reasons: string[] } {
    const reasons: string[] = [];
    if (!this.#loaded) reasons.push('config not loaded yet');
    else if (!this.#listening) reasons.push('xDS not listening yet');
    const store = this.store.health();
    if (store !== undefined) reasons.push(store);
    for (const check of this.#readinessChecks) {
      const why = check();
      if (why !== undefined) reasons.push(why);
    }
    return { ready: reasons.length === 0, reasons };
  }

  /**
   * What the control plane holds but does not serve as written, with why: AuthorizationPolicy
   * rules a ztunnel cannot enforce (HTTP attributes, dropped: more restrictive than asked),
   * and, from sources added with `addNotServedSource`, objects kept out (controller mode's
   * refused objects). `zmesh proxy-status` prints them; GET /not-served.
   */
  notServed(): NotServed[] {
    const out: NotServed[] = [];
    for (const [object, o] of this.store.view().objects)
      if (o.kind === 'AuthorizationPolicy')
        for (const reason of this.#conversionNotes.get(o.raw) ?? []) out.push({ object, reason });
    for (const source of this.#notServedSources) out.push(...source());
    return out.sort((a, b) => a.object.localeCompare(b.object));
  }

  addNotServedSource(source: () => NotServed[]): void {
    this.#notServedSources.push(source);
  }

  /** Adds a reason the control plane may not be able to serve (a store backend, the CA): undefined when fine. */
  addReadinessCheck(check: () => string | undefined): void {
    this.#readinessChecks.push(check);
  }

  /**
   * Every waypoint Gateway with its users and whether a connected waypoint holds its config.
   * Users served through one that is not ready fail closed (ztunnel refuses to bypass a
   * waypoint); users newly bound to it are held on their previous path until it ACKs
   * (waypoint-hold.ts). The gauges `zmesh_cp_waypoints_not_ready` and
   * `zmesh_cp_waypoint_users_held` count them; each waypoint that becomes not ready is
   * logged once, with what happens to its users.
   */
  waypointStatus(): WaypointStatus[] {
    const served = this.#served;
    if (served === undefined) return [];
    const users = new Map<string, number>();
    for (const o of [...served.workloads, ...served.services]) {
      const key = waypointName(o.waypoint);
      if (key !== undefined) users.set(key, (users.get(key) ?? 0) + 1);
    }
    const held = new Map<string, number>();
    for (const h of this.#hold.held) held.set(h.waypoint, (held.get(h.waypoint) ?? 0) + 1);
    const ackers = this.server.proxies.ackersOf(this.server.cache, WAYPOINT_CONFIG_TYPE_URL);
    const out = (served.waypoints ?? []).map((w) => {
      const ackedBy = ackers.get(w.name)?.any ?? [];
      return {
        waypoint: w.name,
        users: users.get(w.name) ?? 0,
        held: held.get(w.name) ?? 0,
        ackedBy,
        ready: ackedBy.length > 0,
      };
    });
    const notReady = new Set(out.filter((w) => !w.ready && w.users + w.held > 0).map((w) => w.waypoint));
    for (const w of out) {
      if (notReady.has(w.waypoint) && !this.#notReadyWaypoints.has(w.waypoint))
        log.warn(
          { waypoint: w.waypoint, users: w.users, held: w.held },
          w.users > 0
            ? 'waypoint not ready: no connected waypoint has ACKed its config; traffic of its users is refused (fail closed) until one does'
            : 'waypoint not ready: no connected waypoint has ACKed its config; the workloads and services newly bound to it are kept on their previous path until one does',
        );
      else if (!notReady.has(w.waypoint) && this.#notReadyWaypoints.has(w.waypoint))
        log.info({ waypoint: w.waypoint, ackedBy: w.ackedBy }, 'waypoint ready');
    }
    this.#notReadyWaypoints = notReady;
    this.metrics.waypointsNotReady.set(notReady.size);
    this.metrics.waypointUsersHeld.set(this.#hold.held.length);
    return out;
  }

  /**
   * What the control plane decides for one pod (`GET /explain/pod`): its PeerAuthentication
   * mode and why, its waypoints, and the L7 policies they enforce for it with why; undefined
   * when the pod is not in the config.
   */
  explainPod(namespace: string, name: string): PodExplanation | undefined {
    const view = this.store.view();
    const pod = view.objects.get(`Pod/${namespace}/${name}`);
    if (pod?.kind !== 'Pod') return undefined;
    // What is served: a pod held on its previous path (waypoint-hold.ts) is explained as it runs.
    return explainPod(pod, this.#served, this.#compiler.peerAuthentications(view));
  }

  /**
   * Each HTTPRoute's and GRPCRoute's Gateway API status (Accepted, ResolvedRefs per parent)
   * from the current view and what the compiler programmed (`GET /route-status`).
   */
  routeStatus(): RouteStatus[] {
    return routeStatuses(this.store.view(), this.#compiled);
  }

  /**
   * Loads the config directory and serves (plaintext on loopback; elsewhere only with `tls`,
   * the serving certificate). A refused initial load is an error:
   * serving an empty config would make every resuming proxy drop what it holds. Without a
   * directory, proxies get their first response after the first `store.apply`.
   */
  async start(port = 0, host = '127.0.0.1', tls?: grpc.ServerCredentials): Promise<number> {
    const loaded = await this.store.reload();
    if (!loaded.ok) {
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: 'config directory',
        // One line: a YAML parser's reason goes on with the text it points at.
        reason: loaded.error.map((r) => r.split('\n')[0]).join('; '),
      });
    }
    this.#loaded = true;
    this.#waypointTimer = setInterval(() => {
      this.#releaseIfReady();
      this.waypointStatus();
    }, WAYPOINT_CHECK_MS).unref();
    const bound = await this.server.listen(port, host, tls);
    this.#listening = true;
    return bound;
  }

  issueNodeToken(node: string): string {
    return this.tokens.issueNodeToken(node);
  }

  /**
   * `zmesh ns l7 on|off`: sets or removes the namespace's waypoint, pushes, and waits until
   * every connected proxy has ACKed the version that carries it (or `timeoutMs` passes).
   * `on` is refused when the namespace has no waypoint Gateway of that name, and also waits
   * for a connected waypoint to ACK the Gateway's config: until one does, the namespace's
   * traffic fails closed, so a timeout names the waypoint among those that did not ACK.
   * A store that cannot be written (etcd unreachable) is `unavailable`: nothing changed.
   */
  async setNamespaceL7(
    namespace: string,
    waypoint: string | undefined,
    timeoutMs: number,
  ): Promise<{ ok: true; value: RolloutReport } | { ok: false; error: string[] } | StoreUnavailable> {
    if (waypoint !== undefined) {
      const gw = this.store.view().objects.get(`Gateway/${namespace}/${waypoint}`);
      if (gw?.kind !== 'Gateway' || !isWaypointClass(gw.spec.gatewayClassName))
        return {
          ok: false,
          error: [
            `namespace ${namespace} has no waypoint: no Gateway ${namespace}/${waypoint} with gatewayClassName ` +
              `${WAYPOINT_CLASS} is in the config; apply one and start its waypoint, then retry`,
          ],
        };
    }
    const started = Date.now();
    if (this.namespaceLabeler) {
      const labelled = await this.namespaceLabeler(namespace, waypoint);
      if (!labelled.ok) return labelled;
      const arrived = () => {
        const ns = this.store.view().objects.get(`Namespace//${namespace}`);
        return ns?.metadata.labels[USE_WAYPOINT_LABEL] === waypoint;
      };
      while (!arrived() && Date.now() - started < timeoutMs) await new Promise((r) => setTimeout(r, 20));
      if (!arrived())
        return {
          ok: false,
          error: [`namespace ${namespace}: the label did not reach the config within ${timeoutMs} ms`],
        };
    } else {
      const applied = await setNamespaceWaypoint(this.store, namespace, waypoint);
      if (!applied.ok) return applied;
    }
    let version = this.server.cache.view(ADDRESS_TYPE_URL).version;
    const waypointVersion = this.server.cache.view(WAYPOINT_CONFIG_TYPE_URL).version;
    let split = await waitForAcks(() => this.proxyStatus(), version, timeoutMs, waypointVersion);
    if (waypoint !== undefined) {
      const name = `${namespace}/${waypoint}`;
      const holders = () => this.server.proxies.ackers(this.server.cache, WAYPOINT_CONFIG_TYPE_URL, name);
      while (holders().current.length === 0 && Date.now() - started < timeoutMs)
        await new Promise((r) => setTimeout(r, 20));
      // Users held on their previous path switch once the waypoint ACKed: wait for that too
      // (on a shared store the release is a commit, served when it arrives).
      this.#releaseIfReady();
      const stillHeld = () =>
        holders().current.length > 0 && this.#hold.held.some((h) => h.waypoint === name);
      while (stillHeld() && Date.now() - started < timeoutMs) await new Promise((r) => setTimeout(r, 20));
      const switched = this.server.cache.view(ADDRESS_TYPE_URL).version;
      if (switched !== version) {
        version = switched;
        split = await waitForAcks(
          () => this.proxyStatus(),
          version,
          Math.max(0, timeoutMs - (Date.now() - started)),
          waypointVersion,
        );
      }
      const { any, current } = holders();
      if (current.length === 0)
        split.notAcked.push({
          proxy: `waypoint ${name}`,
          node: '',
          state: any.length > 0 ? 'PENDING' : 'NOT_CONNECTED',
          reason:
            any.length > 0
              ? `connected waypoints (${any.join(', ')}) have not ACKed the new config`
              : 'no waypoint for this Gateway is connected; the namespace traffic stays on its previous path until one ACKs',
        });
    }
    return { ok: true, value: { namespace, waypoint: waypoint ?? null, version, ...split } };
  }

  proxyStatus(): ProxyReport[] {
    return this.server.proxyStatus();
  }

  async stop(): Promise<void> {
    clearInterval(this.#waypointTimer);
    this.store.close();
    await this.server.close();
    this.state.close();
    await this.#shared?.close();
  }
}

const TOKEN_KEY = 'node-token-key';
const XDS_VERSIONS = 'xds-versions';

function nodeTokenKey(state: StateStore): Buffer {
  return Buffer.from(
    metaOrCreate(state, TOKEN_KEY, () => randomBytes(32).toString('base64')),
    'base64',
  );
}

/** The node-token key of a shared store: created by the first replica, used by all. */
export async function sharedNodeTokenKey(shared: SharedStateStore): Promise<Buffer> {
  const key = await shared.metaOrCreate(TOKEN_KEY, async () => randomBytes(32).toString('base64'));
  return Buffer.from(key, 'base64');
}

function storedVersions(state: StateStore): Record<string, number> {
  const kept = state.getMeta(XDS_VERSIONS);
  if (kept === undefined) return {};
  try {
    return JSON.parse(kept) as Record<string, number>;
  } catch {
    log.warn('stored xDS versions unreadable; versions restart at 1');
    return {};
  }
}

/** Version counters are kept so they keep increasing across restarts; losing the last one is harmless. */
function keepVersions(state: StateStore, versions: Record<string, number>): void {
  const text = JSON.stringify(versions);
  if (state.getMeta(XDS_VERSIONS) === text) return;
  try {
    state.putMeta({ [XDS_VERSIONS]: text });
  } catch (e) {
    log.warn({ err: (e as Error).message }, 'could not keep xDS versions');
  }
}

/**
 * The compiler's conversion of an AuthorizationPolicy for ztunnels (waypoint-targeted ones:
 * none). `note` is told what is not served as written (empty: all of it).
 */
export function convertForZtunnel(
  raw: Record<string, unknown>,
  note?: (reasons: string[]) => void,
): Authorization | undefined {
  const converted = convertAuthorizationPolicy(raw);
  if (!converted.ok) {
    log.warn({ reasons: converted.error }, 'AuthorizationPolicy not served');
    note?.(converted.error.map((r) => `not served: ${r}`));
    return undefined;
  }
  if (converted.value.warnings.length > 0)
    log.warn({ warnings: converted.value.warnings }, 'AuthorizationPolicy');
  note?.([...converted.value.warnings]);
  return converted.value.target === 'ztunnel' ? converted.value.authorization : undefined;
}
