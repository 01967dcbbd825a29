import { readdirSync } from 'node:fs';

/** Open file descriptors of this process. */
export function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/**
 * Waits for the fd count to settle back to at most `baseline + slack` (sockets close
 * asynchronously), returning the last count seen.
 */
export async function settledFds(baseline: number, slack = 0, timeoutMs = 3000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let now = openFds();
  while (now > baseline + slack && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    now = openFds();
  }
  return now;
}
