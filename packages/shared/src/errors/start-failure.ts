import { isZmeshError } from './zmesh-error.js';

/**
 * A daemon (`zmesh ztunnel`, `waypoint`, `control-plane`) that could not start for a known
 * reason (a port it cannot bind, a refused config) says so in one line with the stable code
 * and exits 1, with no stack trace; the caller has closed what it opened. Anything else is
 * a bug and is rethrown with its stack. Returns the exit code.
 */
export function startFailure(
  command: string,
  e: unknown,
  write: (line: string) => void = (line) => process.stderr.write(line),
): number {
  if (!isZmeshError(e)) throw e;
  write(`zmesh ${command}: ${e.code}: ${e.message}\n`);
  return 1;
}
