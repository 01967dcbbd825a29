import { type EventLoopUtilization, performance } from 'node:perf_hooks';

/** A probe returning the event loop's utilisation (0–1) since its previous call. */
export function utilizationProbe(): () => number {
  let last: EventLoopUtilization = performance.eventLoopUtilization();
  return () => {
    const now = performance.eventLoopUtilization();
    const u = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    return u;
  };
}
