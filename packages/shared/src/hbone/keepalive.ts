import { guardedInterval, guardedTimeout } from '../runtime/guarded-task.js';
import type { KeepaliveTiming } from './hbone-settings.js';

/** What the keepalive needs of a session (H2Connection). */
export interface PingingSession {
  readonly destroyed: boolean;
  readonly closed: boolean;
  ping(callback: (error: Error | null, ms: number) => void): boolean;
}

/**
 * Sends a PING every `intervalMs` (one outstanding at a time) and calls `onDead` when one
 * goes unanswered for `timeoutMs`: a peer that vanished without FIN/RST would otherwise
 * hold streams and pool slots until TCP gives up, which takes many minutes.
 * Returns the function that stops it; call it when the session closes.
 */
export function startKeepalive(
  session: PingingSession,
  timing: KeepaliveTiming,
  onDead: () => void,
): () => void {
  let deadline: NodeJS.Timeout | undefined;
  const interval = guardedInterval(
    'hbone_keepalive',
    () => {
      if (deadline !== undefined || session.destroyed || session.closed) return;
      const timer = guardedTimeout('hbone_ping_timeout', onDead, timing.timeoutMs);
      timer.unref();
      deadline = timer;
      const sent = session.ping(() => {
        clearTimeout(timer);
        deadline = undefined;
      });
      if (!sent) {
        clearTimeout(timer);
        deadline = undefined;
      }
    },
    timing.intervalMs,
  );
  interval.unref();
  return () => {
    clearInterval(interval);
    if (deadline !== undefined) clearTimeout(deadline);
  };
}
