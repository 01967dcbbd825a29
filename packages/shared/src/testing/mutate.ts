/**
 * Structure-aware mutation for the config fuzzers: every path to a value in a parsed
 * document, and a copy of it with one of those values replaced, so a valid seed can be
 * bent one field at a time (a wrong type, a missing list, a huge number) past the YAML layer
 * into the decoders behind it.
 */
export function valuePaths(doc: unknown, prefix: readonly (string | number)[] = []): (string | number)[][] {
  const paths: (string | number)[][] = [[...prefix]];
  if (Array.isArray(doc)) {
    for (const [i, v] of doc.entries()) paths.push(...valuePaths(v, [...prefix, i]));
  } else if (doc !== null && typeof doc === 'object')
    for (const [k, v] of Object.entries(doc)) paths.push(...valuePaths(v, [...prefix, k]));
  return paths;
}

/** A deep copy of `doc` with the value at `path` replaced by `value` (the root when path is empty). */
export function replaceAt(doc: unknown, path: readonly (string | number)[], value: unknown): unknown {
  if (path.length === 0) return value;
  const copy = structuredClone(doc) as Record<string | number, unknown>;
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  node[path.at(-1)!] = value;
  return copy;
}
