import type { ListenOptions, Server } from 'node:net';
import { AcceptBackoff, type AcceptBackoffTiming } from './accept-backoff.js';
import { bindError } from './bind-error.js';

export interface ListenInputs {
  /** Names the listener in a bind failure: 'admin', 'forward', 'HBONE (waypoint shop/wp)'. */
  name: string;
  /** Errors once listening (a failed accept); the server keeps listening. */
  onError: (e: Error) => void;
  /** Pauses after EMFILE/ENFILE on accept (tests shorten them). */
  backoff?: AcceptBackoffTiming;
}

/**
 * Binds `server` (or takes over an inherited socket, `{ fd }`) and resolves once it
 * listens; a bind that fails (address in use, no permission) rejects with a
 * `ZM_ERR_LISTEN_BIND` naming the listener, address and errno, so that a daemon can say
 * which port it could not have and exit instead of dying on an unhandled error. From then
 * on the server's `'error'` events go to `onError` and it keeps listening: Node emits one
 * when an accept fails (Linux returns a connection's pending network error from accept),
 * and with no listener that would end the process. EMFILE/ENFILE on accept goes to an
 * `AcceptBackoff` instead, which stops accepting for a short, growing pause.
 */
export function listenServer(
  server: Server,
  opts: ListenOptions | { fd: number },
  inputs: ListenInputs,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const failed = (e: Error) => reject(bindError(inputs.name, opts, e));
    server.once('error', failed);
    try {
      server.listen(opts, () => {
        server.off('error', failed);
        const backoff = new AcceptBackoff(server, opts, inputs.name, inputs.backoff);
        server.on('error', (e: Error) => {
          if (!backoff.handle(e)) inputs.onError(e);
        });
        resolve();
      });
    } catch (e) {
      // Node throws synchronously for an invalid port or path instead of emitting 'error'.
      server.off('error', failed);
      failed(e as Error);
    }
  });
}
