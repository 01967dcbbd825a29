import type { Attempt } from './attempt.js';
import { directTcpAttempts } from './attempts-direct.js';
import { certificateAttempts, identityAttempts } from './attempts-hbone.js';
import { kernelAttempts } from './attempts-kernel.js';
import { l7Attempts } from './attempts-l7.js';
import { lifecycleAttempts } from './attempts-lifecycle.js';
import { meshPathAttempts } from './attempts-loops.js';
import { portAttempts } from './attempts-ports.js';
import { processAttempts } from './attempts-process.js';
import { sourceAttempts } from './attempts-source.js';

/** Every attempt, in the order they run: lifecycle attempts (enrollment, restarts) last, they disturb the rest. */
export function catalogue(): Attempt[] {
  return [
    ...directTcpAttempts(),
    ...portAttempts(),
    ...certificateAttempts(),
    ...identityAttempts(),
    ...meshPathAttempts(),
    ...processAttempts(),
    ...sourceAttempts(),
    ...kernelAttempts(),
    ...l7Attempts(),
    ...lifecycleAttempts(),
  ];
}
