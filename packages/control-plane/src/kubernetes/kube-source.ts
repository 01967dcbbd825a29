import { EventEmitter } from 'node:events';
import {
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  makeInformer,
} from '@kubernetes/client-node';
import { logger } from '@zmesh/shared';
import type { ConfigStore } from '../config-store.js';
import { type Kind, objectKey } from '../k8s-objects.js';

const log = logger('kube-source');

/** Informer events within this window commit as one change (one generation, one push). */
const DEFAULT_BATCH_MS = 20;
/** After an informer fails (list refused, server gone), it restarts after this, doubling up to 30 s. */
const RESTART_BASE_MS = 500;
const RESTART_MAX_MS = 30_000;

/** A watched kind: where its informer lists and watches. */
interface Watched {
  kind: Kind;
  apiVersion: string;
  path: string;
  list: (kc: KubeConfig) => Promise<KubernetesListObject<KubernetesObject>>;
}

const custom = (kind: Kind, group: string, plural: string): Watched => ({
  kind,
  apiVersion: `${group}/v1`,
  path: `/apis/${group}/v1/${plural}`,
  list: (kc) =>
    kc.makeApiClient(CustomObjectsApi).listClusterCustomObject({ group, version: 'v1', plural }) as Promise<
      KubernetesListObject<KubernetesObject>
    >,
});

/**
 * What the controller reads. Endpoints come from Pods and Service selectors, as from YAML, and
 * their health from the Pod's Ready condition (compiler.ts, podStatus); EndpointSlices add
 * terminating, the endpoints of a Service without a selector, and addresses no pod stands
 * behind with their own conditions (compiler.ts, sliceEndpoints).
 */
const WATCHED: readonly Watched[] = [
  {
    kind: 'Namespace',
    apiVersion: 'v1',
    path: '/api/v1/namespaces',
    list: (kc) => kc.makeApiClient(CoreV1Api).listNamespace(),
  },
  {
    kind: 'Pod',
    apiVersion: 'v1',
    path: '/api/v1/pods',
    list: (kc) => kc.makeApiClient(CoreV1Api).listPodForAllNamespaces(),
  },
  {
    kind: 'Service',
    apiVersion: 'v1',
    path: '/api/v1/services',
    list: (kc) => kc.makeApiClient(CoreV1Api).listServiceForAllNamespaces(),
  },
  {
    kind: 'EndpointSlice',
    apiVersion: 'discovery.k8s.io/v1',
    path: '/apis/discovery.k8s.io/v1/endpointslices',
    list: (kc) => kc.makeApiClient(DiscoveryV1Api).listEndpointSliceForAllNamespaces(),
  },
  custom('Gateway', 'gateway.networking.k8s.io', 'gateways'),
  custom('HTTPRoute', 'gateway.networking.k8s.io', 'httproutes'),
  custom('GRPCRoute', 'gateway.networking.k8s.io', 'grpcroutes'),
  custom('AuthorizationPolicy', 'security.istio.io', 'authorizationpolicies'),
];

/** Commit order when a batch has to go one object at a time: what others refer to first. */
const ORDER: readonly Kind[] = [
  'Gateway',
  'Namespace',
  'Service',
  'EndpointSlice',
  'Pod',
  'HTTPRoute',
  'GRPCRoute',
  'AuthorizationPolicy',
];

/** The API server's form of an object, as the controller last saw it (for status writes). */
export type RawObject = KubernetesObject & Record<string, unknown>;

/**
 * The Kubernetes API as the ConfigStore's source: one `@kubernetes/client-node` informer per
 * kind (list, then watch from the list's resourceVersion; a 410 relists), whose events are
 * batched into `ConfigStore.sync`, the same admission and commit path as `apply`. When
 * admission refuses a batch, it is retried one object at a time so that only the refused
 * objects stay out; they are kept with their reasons (`refused()`, 'refused' event) and
 * retried with every later batch, since what they lacked (a namespace, a waypoint) may arrive.
 * Events: 'synced' (after each batch commits or is refused), 'refused' (key, reasons).
 */
export class KubeSource extends EventEmitter {
  readonly #kc: KubeConfig;
  readonly #store: ConfigStore;
  readonly #batchMs: number;
  readonly #informers: Array<ReturnType<typeof makeInformer<KubernetesObject>>> = [];
  /** Store key → document to put, or null to remove. */
  #pending = new Map<string, Record<string, unknown> | null>();
  readonly #refused = new Map<string, { doc: Record<string, unknown>; reasons: string[] }>();
  readonly #raw = new Map<string, RawObject>();
  #timer: NodeJS.Timeout | undefined;
  #started = false;
  #stopped = false;

  constructor(kc: KubeConfig, store: ConfigStore, opts: { batchMs?: number } = {}) {
    super();
    this.#kc = kc;
    this.#store = store;
    this.#batchMs = opts.batchMs ?? DEFAULT_BATCH_MS;
  }

  /** Lists every kind, commits the first batch, then keeps watching. Rejects if a first list fails. */
  async start(): Promise<void> {
    for (const w of WATCHED) {
      const informer = makeInformer(this.#kc, w.path, () => w.list(this.#kc));
      const put = (o: KubernetesObject) => this.#onObject(w, o, false);
      informer.on('add', put);
      informer.on('update', put);
      informer.on('delete', (o) => this.#onObject(w, o, true));
      let delay = RESTART_BASE_MS;
      informer.on('connect', () => {
        delay = RESTART_BASE_MS;
      });
      informer.on('error', (e: unknown) => {
        if (this.#stopped || !this.#started) return;
        log.warn(
          { kind: w.kind, err: (e as Error).message ?? String(e), retryMs: delay },
          'informer failed; restarting',
        );
        setTimeout(() => void informer.start().catch(() => undefined), delay).unref();
        delay = Math.min(delay * 2, RESTART_MAX_MS);
      });
      this.#informers.push(informer);
    }
    // ListWatch.start resolves once listed and watching; a failed first list reports through 'error'.
    const failures: string[] = [];
    await Promise.all(
      this.#informers.map((inf, i) => {
        const onError = (e: unknown) =>
          failures.push(`${WATCHED[i]?.kind}: ${(e as Error).message ?? String(e)}`);
        inf.on('error', onError);
        return inf.start().finally(() => inf.off('error', onError));
      }),
    );
    if (failures.length > 0) {
      await this.stop();
      throw new Error(`Kubernetes API: ${failures.join('; ')}`);
    }
    this.#started = true;
    this.flush();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await Promise.all(this.#informers.map((i) => i.stop()));
  }

  /** The object as the API server last sent it, by store key. */
  raw(key: string): RawObject | undefined {
    return this.#raw.get(key);
  }

  /** Every object of a kind as the API server last sent it (served or not). */
  rawOf(kind: Kind): RawObject[] {
    return [...this.#raw.values()].filter((o) => o.kind === kind);
  }

  /** Objects admission refused, with why; each is retried with every batch. */
  refused(): ReadonlyMap<string, { reasons: string[] }> {
    return this.#refused;
  }

  #onObject(w: Watched, o: KubernetesObject, deleted: boolean): void {
    const plain = JSON.parse(JSON.stringify(o)) as RawObject;
    plain.apiVersion = w.apiVersion;
    plain.kind = w.kind;
    const meta = plain.metadata ?? {};
    const key = objectKey({
      kind: w.kind,
      metadata: { namespace: meta.namespace ?? '', name: meta.name ?? '' },
    });
    if (deleted) this.#raw.delete(key);
    else this.#raw.set(key, plain);
    this.#pending.set(key, deleted || !served(plain) ? null : storeDoc(plain));
    if (!this.#started) return;
    this.#timer ??= setTimeout(() => this.flush(), this.#batchMs);
  }

  /** Commits what is pending (normally on the batch timer). */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const pending = this.#pending;
    this.#pending = new Map();
    for (const [key, doc] of pending) if (doc === null) this.#refused.delete(key);
    const puts = new Map<string, Record<string, unknown>>();
    for (const [key, { doc }] of this.#refused) puts.set(key, doc);
    for (const [key, doc] of pending) if (doc !== null) puts.set(key, doc);
    const removed = [...pending].filter(([, d]) => d === null).map(([k]) => k);
    if (puts.size === 0 && removed.length === 0) return;
    const whole = this.#store.sync([...puts.values()], removed, 'kubernetes');
    if (whole.ok) {
      this.#refused.clear();
    } else {
      // Halves, in dependency order, down to single objects where admission still refuses:
      // only the refused stay out, at O(refused x log n) commits rather than one per object.
      if (removed.length > 0) this.#store.sync([], removed, 'kubernetes');
      const before = new Map(this.#refused);
      this.#refused.clear();
      const order = (k: string) => ORDER.indexOf(k.slice(0, k.indexOf('/')) as Kind);
      this.#bisect(
        [...puts].sort((a, b) => order(a[0]) - order(b[0])),
        before,
      );
      // What was refused for lack of something committed after it gets one more try now.
      if (this.#refused.size > 0 && this.#refused.size < puts.size) {
        const again = [...this.#refused].map(([k, r]) => [k, r.doc] as [string, Record<string, unknown>]);
        const seen = new Map(this.#refused);
        this.#refused.clear();
        this.#bisect(again, seen);
      }
    }
    this.emit('synced');
  }

  #bisect(
    puts: ReadonlyArray<[string, Record<string, unknown>]>,
    before: ReadonlyMap<string, { reasons: string[] }>,
  ): void {
    if (puts.length === 0) return;
    const tried = this.#store.sync(
      puts.map(([, doc]) => doc),
      [],
      'kubernetes',
    );
    if (tried.ok) return;
    if (puts.length > 1) {
      const half = Math.ceil(puts.length / 2);
      this.#bisect(puts.slice(0, half), before);
      this.#bisect(puts.slice(half), before);
      return;
    }
    const [key, doc] = puts[0] as [string, Record<string, unknown>];
    this.#refused.set(key, { doc, reasons: tried.error });
    // Refused objects are retried with every batch: say so once per reason, not per retry.
    if (before.get(key)?.reasons.join() === tried.error.join()) return;
    log.warn(
      { object: key, reasons: tried.error },
      'object refused by admission; kept out of the served config',
    );
    this.emit('refused', key, tried.error);
  }
}

/**
 * A pod is served once scheduled, with an IP, and still running (not host-network: it is the
 * node). A Service a Gateway controls is the waypoint's own: the Gateway stands for it (its
 * status carries the Service's address), as a YAML config has only the Gateway.
 */
function served(o: RawObject): boolean {
  if (o.kind === 'Service') {
    const owners = (o.metadata?.ownerReferences ?? []) as Array<{ kind?: string; controller?: boolean }>;
    return !owners.some((r) => r.kind === 'Gateway' && r.controller === true);
  }
  if (o.kind !== 'Pod') return true;
  const spec = (o.spec ?? {}) as { nodeName?: string; hostNetwork?: boolean };
  const status = (o.status ?? {}) as { podIP?: string; podIPs?: unknown[]; phase?: string };
  return (
    Boolean(spec.nodeName) &&
    !spec.hostNetwork &&
    (Boolean(status.podIP) || (status.podIPs?.length ?? 0) > 0) &&
    status.phase !== 'Succeeded' &&
    status.phase !== 'Failed'
  );
}

/** What the store parses: the object without server bookkeeping. */
function storeDoc(o: RawObject): Record<string, unknown> {
  const { managedFields: _m, ...metadata } = (o.metadata ?? {}) as Record<string, unknown>;
  return { ...o, metadata };
}
