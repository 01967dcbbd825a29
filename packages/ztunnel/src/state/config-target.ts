import type { MeshMetrics, Result, Service, Workload } from '@zmesh/shared';
import type { ForwardListener as ForwardConfig } from './local-config.js';

/** One whole configuration, from a local file or the control plane. */
export interface ConfigUpdate {
  workloads: readonly Workload[];
  services: readonly Service[];
  forwards?: readonly ForwardConfig[];
  /** istio.security.Authorization resources; absent means "unchanged". */
  policies?: readonly unknown[];
}

/**
 * What a config source feeds: the node proxy (`Ztunnel` is one) or a test's stand-in.
 * Declared here, by the state that flows into it, so that sources need not know the proxy.
 * When the optional parts are there, a source also ties authorization staleness to its
 * snapshot's age and readiness to the snapshot's completeness.
 */
export interface ConfigTarget {
  /** Resolves with the applied version, or with every reason the update was refused. */
  applyConfig(update: ConfigUpdate): Promise<Result<number>>;
  readonly metrics: Pick<MeshMetrics, 'registry'>;
  readonly authorizer?: {
    setStaleness(staleness: { ageMs: () => number; maxMs: () => number } | undefined): void;
  };
  /** Workload certificates: their lifetime is the default staleness limit. */
  readonly certs?: { lifetimeMs(): number };
  setConfigReadiness?(incomplete: () => string | undefined): void;
}
