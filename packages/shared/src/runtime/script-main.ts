import { basename } from 'node:path';
import { pathToFileURL } from 'node:url';

/**
 * Whether the module at `moduleUrl` is the script node was started with
 * (`node packages/harness/dist/bench/authz-bench.js`): argv[1] is that module and carries
 * `fileName`. The name matters in the proxies' bundle (scripts/bundle.mjs): a module the
 * bundler places in the entry chunk sees the entry's URL as its own.
 */
export function isScriptMain(moduleUrl: string, fileName: string): boolean {
  const script = process.argv[1];
  return script !== undefined && basename(script) === fileName && pathToFileURL(script).href === moduleUrl;
}
