import { BUILD_INFO } from '@zmesh/shared/cli';

// What `zmesh install` takes (its flags' defaults and its values file), apart from the
// manifests (manifests.ts, with the Kubernetes models): bad input is judged before those load.

export interface InstallValues {
  /** Control-plane replicas (a PodDisruptionBudget keeps one up when there are two or more). */
  readonly controlPlaneReplicas: number;
  /**
   * `etcd://host:port[,…]`: the replicas share their state in etcd (`--store`); more than one
   * replica needs it. Empty: the embedded store on the pod's `state` volume (`--state-dir`).
   */
  readonly stateStore: string;
  readonly trustDomain: string;
  /** Audience of ztunnel's projected ServiceAccount token. */
  readonly tokenAudience: string;
  readonly imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never';
  /** ZMESH_LOG in every container: error, warn, info, debug. */
  readonly logLevel: 'error' | 'warn' | 'info' | 'debug';
  /** ztunnel's --access-log: on, off or sample:F. */
  readonly accessLog: string;
}

export const DEFAULT_VALUES: InstallValues = {
  // One replica unless the replicas share a store (stateStore): each would keep its own applies.
  controlPlaneReplicas: 1,
  stateStore: '',
  trustDomain: 'cluster.local',
  tokenAudience: 'zmesh',
  imagePullPolicy: 'IfNotPresent',
  logLevel: 'info',
  accessLog: 'on',
};

/** What `make image` tags (scripts/image.sh). */
export const DEFAULT_IMAGE = `localhost/zmesh:${BUILD_INFO.version}`;
export const DEFAULT_NAMESPACE = 'zmesh-system';
