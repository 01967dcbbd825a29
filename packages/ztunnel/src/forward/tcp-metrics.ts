import {
  type MeshMetrics,
  type ResponseFlag,
  spiffeIdOf,
  type TcpLabels,
  type Workload,
} from '@zmesh/shared';
import type { CopyResult } from './bidirectional-copy.js';

/** Istio's labels for one proxied connection, from facts the proxy established itself. */
export function tcpLabels(opts: {
  reporter: 'source' | 'destination';
  source?: Workload;
  sourcePrincipal?: string;
  destination?: Workload;
  flag: ResponseFlag;
  mtls: boolean;
}): TcpLabels {
  return {
    reporter: opts.reporter,
    source_workload: opts.source?.workloadName ?? 'unknown',
    source_workload_namespace: opts.source?.namespace ?? 'unknown',
    source_principal: opts.sourcePrincipal ?? (opts.source ? spiffeIdOf(opts.source) : 'unknown'),
    destination_workload: opts.destination?.workloadName ?? 'unknown',
    destination_workload_namespace: opts.destination?.namespace ?? 'unknown',
    destination_principal: opts.destination ? spiffeIdOf(opts.destination) : 'unknown',
    response_flags: opts.flag,
    connection_security_policy: opts.mtls ? 'mutual_tls' : 'none',
  };
}

export function recordOpened(metrics: MeshMetrics, labels: TcpLabels): void {
  metrics.tcpOpened.inc(labels);
}

export function recordClosed(metrics: MeshMetrics, labels: TcpLabels, copy: CopyResult): void {
  metrics.tcpSent.inc(labels, copy.sent);
  metrics.tcpReceived.inc(labels, copy.received);
  metrics.tcpClosed.inc(labels);
}
