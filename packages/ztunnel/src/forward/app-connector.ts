import { connect, type Socket } from 'node:net';
import { type Workload, whenConnected } from '@zmesh/shared';

/**
 * Opens the last hop to a local application. Explicit-proxy mode connects over the
 * host's loopback to the workload's own address; capture mode replaces this with a
 * socket created inside the pod's network namespace.
 */
export type AppConnector = (workload: Workload, host: string, port: number) => Promise<Socket>;

export const loopbackAppConnector: AppConnector = (_workload, host, port) =>
  whenConnected(connect({ host, port, allowHalfOpen: true, noDelay: true }));
