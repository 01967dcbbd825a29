import type { BypassLab } from './bypass-lab.js';

/**
 * What happened to an attempt:
 * - `denied`: an enforcement point refused it (strict inbound drop, TLS or CONNECT refusal,
 *   authorization, the kernel's EPERM/EACCES) or there was nothing to reach;
 * - `captured`: redirected into the pod's ztunnel, which carried or refused it under the
 *   pod's own identity (for a forbidden target: refused at the destination);
 * - `exempt`: reached its target on a path that is outside the mesh by configuration
 *   (documented, e.g. read-only metrics, UDP);
 * - `delivered`: reached a target policy forbids, or was attributed to a forged identity:
 *   a bypass;
 * - `error`: the attempt could not be executed, so it proves nothing (never a pass).
 */
export type Observed = 'denied' | 'captured' | 'exempt' | 'delivered' | 'error';
export type Expected = Exclude<Observed, 'delivered' | 'error'>;

export interface Outcome {
  observed: Observed;
  evidence: string[];
}

export interface Attempt {
  id: string;
  description: string;
  expected: Expected;
  /** Other safe outcomes this row accepts (e.g. a port that is exempt where exposed but not exposed here). */
  alsoAccepted?: Expected[];
  /** Runs the attempt and classifies it from what the target saw and which counters moved. */
  run(lab: BypassLab): Promise<Outcome>;
}

export interface AttemptReport {
  id: string;
  description: string;
  expected: Expected;
  observed: Observed;
  passed: boolean;
  evidence: string[];
}

export interface BypassReport {
  attempts: AttemptReport[];
  summary: { total: number; bypassed: number; errors: number; failed: number };
}
