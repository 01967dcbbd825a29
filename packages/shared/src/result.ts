/**
 * Failures that cross a layer boundary are values, not exceptions: decoding outside
 * input (xDS, YAML, CONNECT headers) returns every reason it found so that a NACK or
 * an HTTP 400 can carry them all.
 */
export type Result<T, E = string[]> = { ok: true; value: T } | { ok: false; error: E };

export function ok<T>(value: T): { ok: true; value: T } {
  return { ok: true, value };
}

export function err<E>(error: E): { ok: false; error: E } {
  return { ok: false, error };
}
