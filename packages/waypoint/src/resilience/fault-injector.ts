import type { FaultPolicy } from '../config/waypoint-config.js';

export interface FaultPlan {
  delayMs: number;
  abortStatus?: number;
}

/** Istio fault injection: each of delay and abort applies to `percent` of requests, rolled apart. */
export function planFault(fault: FaultPolicy | undefined, random: () => number): FaultPlan {
  const plan: FaultPlan = { delayMs: 0 };
  if (!fault) return plan;
  if (fault.delay && random() * 100 < fault.delay.percent) plan.delayMs = fault.delay.fixedDelayMs;
  if (fault.abort && random() * 100 < fault.abort.percent) plan.abortStatus = fault.abort.httpStatus;
  return plan;
}
