/**
 * What `zmesh version` prints. `make build` (scripts/build-info.mjs, after tsc) rewrites this
 * module's compiled form, dist/runtime/build-info.js, with the root package.json's version,
 * the git commit and the build time, so the bundles and the image carry them inline. These
 * placeholders are what a build without that step (a bare `tsc -b`) reports.
 */
export interface BuildInfo {
  readonly version: string;
  /** `git rev-parse HEAD`, with `-dirty` when the tree had uncommitted changes. */
  readonly commit: string;
  /** ISO-8601 UTC. */
  readonly builtAt: string;
}

export const BUILD_INFO: BuildInfo = { version: '0.0.0-dev', commit: 'unknown', builtAt: 'unknown' };

/** One line: `zmesh 0.1.0 (commit 1a2b3c4…, built 2026-12-04T15:00:00Z)`. */
export function versionLine(info: BuildInfo = BUILD_INFO): string {
  return `zmesh ${info.version} (commit ${info.commit}, built ${info.builtAt})`;
}
