import { isZmeshError } from '@zmesh/shared';

/**
 * A daemon that could not start for a known reason (a port it cannot bind, a refused
 * config) says so in one line with the stable code and exits 1, with no stack trace; the
 * caller has closed what it opened. Anything else is a bug and keeps its stack.
 */
export function startFailure(command: string, e: unknown): number {
  if (!isZmeshError(e)) throw e;
  console.error(`zmesh ${command}: ${e.code}: ${e.message}`);
  return 1;
}
