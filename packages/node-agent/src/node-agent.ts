import { statSync } from 'node:fs';
import {
  CoreV1Api,
  type KubeConfig,
  type KubernetesObject,
  ListWatch,
  type V1Namespace,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node';
import { logger, type ZdsPod, type ZdsServer, ZmeshError } from '@zmesh/shared';
import { Counter, Gauge, type Registry } from 'prom-client';
import { wantsCapture } from './pods/pod-policy.js';
import { scanProc } from './pods/proc-scan.js';

const log = logger('node-agent');

/** After an informer fails (server gone, list refused), it restarts after this, doubling up to 30 s. */
const RESTART_BASE_MS = 500;
const RESTART_MAX_MS = 30_000;
/** After ztunnel refuses a pod found in /proc, the next try waits this long, doubling up to a minute. */
const RETRY_BASE_MS = 1_000;
const RETRY_MAX_MS = 60_000;
/** How long a CNI ADD waits for the pod to reach this agent's informer (kubelet is ahead of the watch). */
const CNI_POD_WAIT_MS = 5_000;

/** What the CNI plugin tells the agent on ADD (`CNI_NETNS`, `CNI_CONTAINERID`, `CNI_ARGS`). */
export interface CniAdd {
  netns: string;
  containerId: string;
  podUid?: string;
  podName: string;
  podNamespace: string;
}

export interface NodeAgentOptions {
  kc: KubeConfig;
  node: string;
  zds: ZdsServer;
  /** Where the host's /proc is (`/host/proc` in the DaemonSet). */
  proc: string;
  /** How often pods that want capture but have no netns yet are looked for in /proc. */
  rescanMs: number;
  registry: Registry;
}

interface Enrolled {
  netnsPath: string;
  source: 'proc' | 'cni';
}

/**
 * The node agent (docs/kubernetes.md, "Node agent"): learns its node's pods from the API
 * (an informer on Pods with `spec.nodeName=<node>`, one on Namespaces for their labels),
 * finds each enrolled pod's network namespace in /proc (pods already running) or from the
 * CNI plugin (new pods, before their containers start), and hands them to ztunnel over ZDS
 * (`ZdsServer`: a snapshot on connect, Adds with the netns fd, Dels when a pod goes).
 * Changes to one pod run one at a time, in order.
 */
export class NodeAgent {
  readonly #o: NodeAgentOptions;
  readonly #pods = new Map<string, V1Pod>();
  readonly #namespaces = new Map<string, Record<string, string>>();
  readonly #enrolled = new Map<string, Enrolled>();
  readonly #queues = new Map<string, Promise<void>>();
  /** Pods ztunnel refused: when the scan may try each again, and the wait after that. */
  readonly #backoff = new Map<string, { at: number; waitMs: number }>();
  readonly #watches: ListWatch<KubernetesObject>[] = [];
  readonly #ownNetns: number | undefined;
  readonly #enrolledGauge: Gauge;
  readonly #failures: Counter<'source'>;
  readonly #cniRequests: Counter<'result'>;
  #timer: NodeJS.Timeout | undefined;
  #synced = false;
  #stopped = false;

  constructor(o: NodeAgentOptions) {
    this.#o = o;
    try {
      this.#ownNetns = statSync('/proc/self/ns/net').ino;
    } catch {
      this.#ownNetns = undefined;
    }
    this.#enrolledGauge = new Gauge({
      name: 'zmesh_node_agent_pods_enrolled',
      help: 'Pods of this node handed to ztunnel over ZDS',
      registers: [o.registry],
      collect: () => this.#enrolledGauge.set(this.#enrolled.size),
    });
    this.#failures = new Counter({
      name: 'zmesh_node_agent_enroll_failures_total',
      help: 'Adds ztunnel refused (ZM_ERR_ZDS_WORKLOAD) or that could not be sent, by how the netns was found',
      labelNames: ['source'],
      registers: [o.registry],
    });
    this.#cniRequests = new Counter({
      name: 'zmesh_node_agent_cni_requests_total',
      help: 'CNI ADDs from the plugin, by result (enrolled, skipped, refused)',
      labelNames: ['result'],
      registers: [o.registry],
    });
  }

  /** Both informers listed (and watching): the agent knows its node. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Lists Namespaces and this node's Pods, enrolls what is running, then keeps watching. */
  async start(): Promise<void> {
    const core = this.#o.kc.makeApiClient(CoreV1Api);
    const fieldSelector = `spec.nodeName=${this.#o.node}`;
    const namespaces = new ListWatch<V1Namespace>(
      '/api/v1/namespaces',
      new Watch(this.#o.kc),
      () => core.listNamespace(),
      false,
    );
    const pods = new ListWatch<V1Pod>(
      '/api/v1/pods',
      new Watch(this.#o.kc),
      () => core.listPodForAllNamespaces({ fieldSelector }),
      false,
      undefined,
      fieldSelector,
    );
    const onNamespace = (ns: V1Namespace, gone: boolean) => {
      const name = ns.metadata?.name ?? '';
      if (gone) this.#namespaces.delete(name);
      else this.#namespaces.set(name, ns.metadata?.labels ?? {});
      if (!this.#synced) return;
      for (const [uid, pod] of this.#pods) if (pod.metadata?.namespace === name) this.#reconcile(uid);
    };
    namespaces.on('add', (o) => onNamespace(o, false));
    namespaces.on('update', (o) => onNamespace(o, false));
    namespaces.on('delete', (o) => onNamespace(o, true));
    const onPod = (pod: V1Pod, gone: boolean) => {
      const uid = pod.metadata?.uid;
      if (!uid) return;
      if (gone) {
        this.#pods.delete(uid);
        this.#backoff.delete(uid);
      } else this.#pods.set(uid, pod);
      if (this.#synced) this.#reconcile(uid);
    };
    pods.on('add', (o) => onPod(o, false));
    pods.on('update', (o) => onPod(o, false));
    pods.on('delete', (o) => onPod(o, true));
    const failures: string[] = [];
    for (const [what, w] of [
      ['Namespaces', namespaces],
      ['Pods', pods],
    ] as const) {
      const watch = w as unknown as ListWatch<KubernetesObject>;
      this.#restartOnError(what, watch);
      const first = (e: unknown) => failures.push(`${what}: ${(e as Error).message ?? String(e)}`);
      watch.on('error', first);
      await watch.start().finally(() => watch.off('error', first));
      this.#watches.push(watch);
    }
    if (failures.length > 0) {
      await this.stop();
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: 'kubernetes',
        reason: `the API server: ${failures.join('; ')}`,
      });
    }
    this.#synced = true;
    // Every running pod recorded before ZDS is served: a ztunnel's first snapshot must not
    // miss pods it holds (it would remove their capture).
    await Promise.allSettled(this.#rescan());
    this.#timer = setInterval(() => void Promise.allSettled(this.#rescan()), this.#o.rescanMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    await Promise.all(this.#watches.map((w) => w.stop()));
    await Promise.allSettled([...this.#queues.values()]);
  }

  #restartOnError(what: string, watch: ListWatch<KubernetesObject>): void {
    let delay = RESTART_BASE_MS;
    watch.on('connect', () => {
      delay = RESTART_BASE_MS;
    });
    watch.on('error', (e: unknown) => {
      if (this.#stopped || !this.#synced) return;
      log.warn(
        { watch: what, err: (e as Error).message ?? String(e), retryMs: delay },
        'watch failed; restarting',
      );
      setTimeout(() => void watch.start().catch(() => undefined), delay).unref();
      delay = Math.min(delay * 2, RESTART_MAX_MS);
    });
  }

  /** Every pod that wants capture and has none yet, looked for in /proc; the gone removed. */
  #rescan(): Promise<void>[] {
    const now = Date.now();
    const missing = [...this.#pods.keys()].filter(
      (uid) => this.#wants(uid) && !this.#enrolled.has(uid) && (this.#backoff.get(uid)?.at ?? 0) <= now,
    );
    const found = missing.length > 0 ? scanProc(this.#o.proc, this.#ownNetns) : new Map();
    const adds: Promise<void>[] = [];
    for (const uid of missing) {
      const at = found.get(uid);
      if (at) adds.push(this.#serial(uid, () => this.#add(uid, at.netnsPath, 'proc')));
    }
    for (const uid of this.#enrolled.keys()) if (!this.#wants(uid)) this.#reconcile(uid);
    return adds;
  }

  #wants(uid: string): boolean {
    const pod = this.#pods.get(uid);
    return pod !== undefined && wantsCapture(pod, this.#namespaces.get(pod.metadata?.namespace ?? ''));
  }

  /** One pod brought in line: enrolled if it wants capture and its netns is in /proc, removed if not. */
  #reconcile(uid: string): void {
    if (this.#wants(uid)) {
      if (this.#enrolled.has(uid)) return;
      const at = scanProc(this.#o.proc, this.#ownNetns).get(uid);
      // Not running yet: the CNI plugin (or a later scan) brings its netns.
      if (at) this.#serial(uid, () => this.#add(uid, at.netnsPath, 'proc'));
    } else if (this.#enrolled.has(uid)) this.#serial(uid, () => this.#remove(uid));
  }

  #serial(uid: string, task: () => Promise<void>): Promise<void> {
    const next = (this.#queues.get(uid) ?? Promise.resolve()).then(task, task);
    const settled = next.catch(() => undefined);
    this.#queues.set(uid, settled);
    void settled.then(() => {
      if (this.#queues.get(uid) === settled) this.#queues.delete(uid);
    });
    return next;
  }

  async #add(uid: string, netnsPath: string, source: Enrolled['source']): Promise<void> {
    const pod = this.#pods.get(uid);
    if (!pod || !this.#wants(uid)) return;
    if (this.#enrolled.get(uid)?.netnsPath === netnsPath) return;
    try {
      await this.#o.zds.addPod(zdsPod(uid, pod, netnsPath));
      this.#enrolled.set(uid, { netnsPath, source });
      this.#backoff.delete(uid);
      log.info({ pod: podName(pod), uid, netns: netnsPath, source }, 'pod enrolled');
    } catch (e) {
      this.#failures.inc({ source });
      this.#enrolled.delete(uid);
      const waitMs = Math.min((this.#backoff.get(uid)?.waitMs ?? RETRY_BASE_MS / 2) * 2, RETRY_MAX_MS);
      this.#backoff.set(uid, { at: Date.now() + waitMs, waitMs });
      // Out of the agent's snapshot too: a later scan or CNI ADD tries again.
      await this.#o.zds.removePod(uid).catch(() => undefined);
      log.warn({ pod: podName(pod), uid, source, err: (e as Error).message }, 'enrolment refused');
      throw e;
    }
  }

  async #remove(uid: string): Promise<void> {
    if (!this.#enrolled.delete(uid)) return;
    try {
      await this.#o.zds.removePod(uid);
      log.info({ uid }, 'pod removed');
    } catch (e) {
      log.warn({ uid, err: (e as Error).message }, 'ztunnel refused a Del');
    }
  }

  /**
   * The CNI plugin's ADD: the pod's netns before its containers start. Resolves with whether
   * the pod was enrolled (false: not an ambient pod, nothing to do); rejects with
   * `ZM_ERR_CNI_REFUSED` when the pod is unknown here, no ztunnel is connected, or ztunnel
   * refused it (the plugin then fails the ADD, and the runtime retries the sandbox).
   */
  async cniAdd(add: CniAdd): Promise<boolean> {
    const name = `${add.podNamespace}/${add.podName}`;
    const refuse = (reason: string) => {
      this.#cniRequests.inc({ result: 'refused' });
      return new ZmeshError('ZM_ERR_CNI_REFUSED', { pod: name, reason });
    };
    const deadline = Date.now() + CNI_POD_WAIT_MS;
    let uid = this.#find(add);
    while (!uid && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      uid = this.#find(add);
    }
    if (!uid) throw refuse(`no such pod on node ${this.#o.node} in the API`);
    if (!this.#wants(uid)) {
      this.#cniRequests.inc({ result: 'skipped' });
      return false;
    }
    if (this.#o.zds.syncedClients === 0) throw refuse('no ztunnel is connected to the ZDS socket');
    const podUid = uid;
    try {
      await this.#serial(podUid, () => this.#add(podUid, add.netns, 'cni'));
    } catch (e) {
      throw refuse((e as Error).message);
    }
    this.#cniRequests.inc({ result: 'enrolled' });
    return true;
  }

  #find(add: CniAdd): string | undefined {
    if (add.podUid) return this.#pods.has(add.podUid) ? add.podUid : undefined;
    for (const [uid, pod] of this.#pods)
      if (pod.metadata?.name === add.podName && pod.metadata?.namespace === add.podNamespace) return uid;
    return undefined;
  }
}

function podName(pod: V1Pod): string {
  return `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
}

function zdsPod(uid: string, pod: V1Pod, netnsPath: string): ZdsPod {
  return {
    uid,
    netnsPath,
    info: {
      name: pod.metadata?.name ?? '',
      namespace: pod.metadata?.namespace ?? '',
      serviceAccount: pod.spec?.serviceAccountName ?? 'default',
    },
  };
}
