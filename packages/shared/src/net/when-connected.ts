import type { Socket } from 'node:net';

/** Bound on the wait for a connect to a local address (an application, a loopback stand-in). */
export const CONNECT_TIMEOUT_MS = 5_000;

/** Resolves once `socket` connects; a connect that hangs is bounded by `timeoutMs`. */
export function whenConnected(socket: Socket, timeoutMs = CONNECT_TIMEOUT_MS): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => socket.destroy(new Error('connect timeout')), timeoutMs);
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
