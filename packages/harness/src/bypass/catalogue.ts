import type { Attempt } from './attempt.js';
import { directTcpAttempts } from './attempts-direct.js';

/** Every attempt, in the order they run: lifecycle attempts (restarts) last, they disturb the others. */
export function catalogue(): Attempt[] {
  return [...directTcpAttempts()];
}
