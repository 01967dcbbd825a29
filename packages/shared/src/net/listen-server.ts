import type { ListenOptions, Server } from 'node:net';

/**
 * Binds `server` (or takes over an inherited socket, `{ fd }`) and resolves once it
 * listens; a bind that fails (address in use, no permission) rejects. From then on the
 * server's `'error'` events go to `onError` and it keeps listening: Node emits one when an
 * accept fails (Linux returns a connection's pending network error from accept), and with
 * no listener that would end the process.
 */
export function listenServer(
  server: Server,
  opts: ListenOptions | { fd: number },
  onError: (e: Error) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts, () => {
      server.off('error', reject);
      server.on('error', onError);
      resolve();
    });
  });
}
