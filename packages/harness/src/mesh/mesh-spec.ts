import type { ClusterSpec } from '../cluster/cluster-spec.js';
import type { PodInfo } from '../cluster/topology.js';
import type { ApiServerDouble } from '../kube-api/api-server-double.js';
import type { WaypointShape } from './mesh-objects.js';

/** What a local mesh is made of (MeshSpec) and how LocalMesh runs it (ClusterMeshOptions). */

/** A service of the local mesh: a VIP inside the cluster's pod range, backed by pods by name. */
export interface MeshService {
  name: string;
  namespace: string;
  vip: string;
  ports: Array<{ port: number; targetPort: number }>;
  /** Pods (by name) behind the service. */
  pods: string[];
  /** Name of the pod whose address is the service's waypoint (Istio GatewayAddress by address). */
  waypoint?: string;
}

export interface MeshSpec extends ClusterSpec {
  services?: MeshService[];
  /** istio.security.Authorization resources, written to the config's `policies:` as given. */
  policies?: unknown[];
  /** Pod name → name of the pod that is its waypoint (a workload-attached waypoint by address). */
  podWaypoints?: Record<string, string>;
  /**
   * Namespace waypoints that run (control-plane mode only): `zmesh waypoint` in its pod
   * (never enrolled), configured over xDS; the namespace uses it for its services and pods.
   */
  waypoints?: WaypointShape[];
}

export interface ClusterMeshOptions {
  /** Pods enrolled at start (default: all). */
  enroll?: (pod: PodInfo) => boolean;
  /** Pods left out of ztunnel's configuration, so they stay pending after enrollment. */
  unconfigured?: (pod: PodInfo) => boolean;
  ztunnelLog?: string;
  /** Extra `zmesh ztunnel` arguments for every node (e.g. `--fairness off`). */
  ztunnelArgs?: string[];
  /** CPU list the ztunnels are pinned to with taskset (benchmarks and harnesses), or one per node. */
  ztunnelCpus?: string | Readonly<Record<string, string>>;
  /** CPU list the waypoints are pinned to with taskset. */
  waypointCpus?: string;
  /** Extra environment for the ztunnels (e.g. ZMESH_LOG_<SCOPE> levels). */
  ztunnelEnv?: Record<string, string>;
  /** Receives each node's ztunnel stderr (JSON log lines); without it they go to our stderr. */
  ztunnelStderr?: (node: string, chunk: string) => void;
  /**
   * Feed the ztunnels from a real `zmesh control-plane` (xDS, CA, node tokens, roots file)
   * instead of a local config file and CA: `true` for defaults, or the outage knobs.
   */
  controlPlane?: boolean | ControlPlaneMode;
}

export interface ControlPlaneMode {
  maxCertTtlSeconds?: number;
  /**
   * Controller mode: the control plane runs `--kubernetes` against this API-server double,
   * which the harness fills with the mesh's objects instead of applying YAML; each waypoint
   * is started from the Deployment the controller made for its Gateway.
   */
  kubernetes?: ApiServerDouble;
  /**
   * With `kubernetes`: each node runs `zmesh node-agent` against the API instead of the
   * harness acting as its agent. Enrolling a pod then means starting its first process (a
   * pause process, as a runtime does): the agent finds it in /proc. A pod added later is
   * enrolled the way a runtime starts one: `cniAdd` runs the plugin the agent installed.
   */
  nodeAgents?: boolean;
  /** Start ztunnels with `--persist-keys` (a private tmpfs directory per node under /dev/shm). */
  persistKeys?: boolean | ((node: string) => boolean);
  /** `initialMs:maxMs` for xDS reconnects and certificate retries (time-compressed drills). */
  xdsBackoff?: string;
  authzMaxStalenessSeconds?: number;
}

/** VIPs live in 10.244.250.0/24: inside the harness's pod range, owned by no pod. */
export const VIP_PREFIX = '10.244.250.';
