import { connect, type Socket } from 'node:net';
import { type Workload, whenConnected } from '@zmesh/shared';

/**
 * Opens the last hop to a local application. Explicit-proxy mode connects over the
 * host's loopback to the workload's own address (the source is not preserved there);
 * capture mode replaces this with a socket created inside the pod's network namespace,
 * from the source address.
 */
export type AppConnector = (
  workload: Workload,
  host: string,
  port: number,
  /** The original client's address (the tunnel's source, or what the waypoint names). */
  source?: string,
) => Promise<Socket>;

export const loopbackAppConnector: AppConnector = (_workload, host, port) =>
  whenConnected(connect({ host, port, allowHalfOpen: true, noDelay: true }));
