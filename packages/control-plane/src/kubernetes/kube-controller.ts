import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { err, logger, ok, type Result } from '@zmesh/shared';
import type { ControlPlane } from '../control-plane.js';
import type { ControlPlaneMetrics } from '../cp-metrics.js';
import { USE_WAYPOINT_LABEL } from '../k8s-objects.js';
import { KubeSource } from './kube-source.js';
import { KubeWriter } from './kube-writer.js';
import { LeaseElector } from './lease-elector.js';
import { NODE_SERVICE_ACCOUNT, tokenReviewAuthenticator } from './token-review.js';
import type { WaypointTemplate } from './waypoint-objects.js';

const log = logger('kube-controller');

export const LEASE_NAME = 'zmesh-control-plane';
/** The leader re-checks Gateway readiness (Programmed) this often, beside every change. */
const RESYNC_MS = 2000;

export interface KubeControllerOptions {
  /** A kubeconfig file; absent: in-cluster (the pod's ServiceAccount token and CA). */
  kubeconfig?: string;
  /** This replica's name in the Lease (the pod name). */
  identity: string;
  /** Where the Lease lives (the control plane's namespace). */
  namespace: string;
  leaseSeconds?: number;
  waypoint: WaypointTemplate;
  batchMs?: number;
  /**
   * `namespace/name` of the ServiceAccounts whose projected tokens authenticate node proxies
   * (TokenReview, audience `waypoint.tokenAudience`). Default: `<namespace>/zmesh-node`, the
   * DaemonSet's of `zmesh install`.
   */
  nodeServiceAccounts?: readonly string[];
}

/**
 * `zmesh control-plane --kubernetes`: the Kubernetes API as the config source (KubeSource),
 * leader election on a Lease (LeaseElector), and the leader's writes (KubeWriter). Every
 * replica runs the informers and serves xDS from its own store; only the leader writes.
 * `zmesh ns l7` labels the Namespace through the API instead of changing the store directly.
 */
export class KubeController {
  readonly kc: KubeConfig;
  readonly source: KubeSource;
  readonly elector: LeaseElector;
  readonly writer: KubeWriter;
  #timer: NodeJS.Timeout | undefined;
  readonly #metrics: ControlPlaneMetrics;

  constructor(cp: ControlPlane, opts: KubeControllerOptions) {
    this.#metrics = cp.metrics;
    this.kc = new KubeConfig();
    if (opts.kubeconfig === undefined) this.kc.loadFromCluster();
    else this.kc.loadFromFile(opts.kubeconfig);
    this.source = new KubeSource(
      this.kc,
      cp.store,
      opts.batchMs === undefined ? {} : { batchMs: opts.batchMs },
    );
    this.elector = new LeaseElector(this.kc, {
      namespace: opts.namespace,
      name: LEASE_NAME,
      identity: opts.identity,
      ...(opts.leaseSeconds === undefined ? {} : { leaseSeconds: opts.leaseSeconds }),
    });
    this.writer = new KubeWriter(
      this.kc,
      this.source,
      opts.waypoint,
      (key) => cp.waypointStatus().some((w) => w.waypoint === key && w.ackedBy.length > 0),
      (write) => cp.metrics.kubernetesWriteFailures.inc({ write }),
      () => cp.routeStatus(),
    );
    // Node proxies authenticate with their projected ServiceAccount token (zmesh node tokens still work).
    cp.server.authenticator = tokenReviewAuthenticator(this.kc, {
      audience: opts.waypoint.tokenAudience,
      trustDomain: opts.waypoint.trustDomain,
      nodeAccounts: opts.nodeServiceAccounts ?? [`${opts.namespace}/${NODE_SERVICE_ACCOUNT}`],
      podNode: (namespace, name) => {
        const o = cp.store.view().objects.get(`Pod/${namespace}/${name}`);
        return o?.kind === 'Pod' ? o.spec.nodeName : undefined;
      },
    });
    cp.addNotServedSource(() =>
      [...this.source.refused()].flatMap(([object, r]) =>
        r.reasons.map((reason) => ({ object, reason: `kept out by admission: ${reason}` })),
      ),
    );
    const core = this.kc.makeApiClient(CoreV1Api);
    cp.namespaceLabeler = async (namespace, waypoint): Promise<Result<void>> => {
      try {
        await core.patchNamespace(
          { name: namespace, body: { metadata: { labels: { [USE_WAYPOINT_LABEL]: waypoint ?? null } } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        );
        return ok(undefined);
      } catch (e) {
        const code = (e as { code?: number }).code;
        return err([
          `namespace ${namespace}: the API server refused the label${code ? ` (HTTP ${code})` : ''}`,
        ]);
      }
    };
  }

  /** Lists everything and commits the first config (before xDS serves), then elects. */
  async start(): Promise<void> {
    await this.source.start();
    const reconcile = () => {
      if (this.elector.leading) void this.writer.reconcile();
    };
    this.source.on('synced', () => {
      this.#metrics.kubernetesRefused.set(this.source.refused().size);
      reconcile();
    });
    this.elector.on('leading', () => {
      this.#metrics.kubernetesLeader.set(1);
      reconcile();
    });
    this.elector.on('following', () => this.#metrics.kubernetesLeader.set(0));
    this.#metrics.kubernetesRefused.set(this.source.refused().size);
    this.elector.start();
    this.#timer = setInterval(reconcile, RESYNC_MS).unref();
    log.info({ server: this.kc.getCurrentCluster()?.server }, 'reading config from the Kubernetes API');
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.elector.stop();
    await this.source.stop();
  }
}
