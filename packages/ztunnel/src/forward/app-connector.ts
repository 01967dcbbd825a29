import { connect, type Socket } from 'node:net';
import type { Workload } from '@zmesh/shared';

/**
 * Opens the last hop to a local application. Explicit-proxy mode connects over the
 * host's loopback to the workload's own address; capture mode replaces this with a
 * socket created inside the pod's network namespace.
 */
export type AppConnector = (workload: Workload, host: string, port: number) => Promise<Socket>;

/** Bound on the wait for a local application to accept. */
export const APP_CONNECT_TIMEOUT_MS = 5_000;

export const loopbackAppConnector: AppConnector = (_workload, host, port) =>
  whenConnected(connect({ host, port, allowHalfOpen: true, noDelay: true }));

/** Resolves once `socket` connects; a connect that hangs is bounded by APP_CONNECT_TIMEOUT_MS. */
export function whenConnected(socket: Socket): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => socket.destroy(new Error('connect timeout')), APP_CONNECT_TIMEOUT_MS);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeListener('error', reject);
      resolve(socket);
    });
    socket.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}
