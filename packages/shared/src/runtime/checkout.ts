import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Files that stay in the checkout rather than in a package's dist/ (the .proto files, the
 * compiled BPF object) are found from the checkout root: the nearest directory above this
 * module that holds pnpm-workspace.yaml. The same code then works from a package's dist/
 * and from the proxies' bundle (scripts/bundle.mjs), which sit at different depths.
 */
export function checkoutPath(...segments: string[]): string {
  return join(checkoutRoot(), ...segments);
}

let root: string | undefined;

function checkoutRoot(): string {
  if (root !== undefined) return root;
  const start = dirname(fileURLToPath(import.meta.url));
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'pnpm-workspace.yaml'))) {
      root = dir;
      return dir;
    }
    if (dirname(dir) === dir)
      throw new Error(`zmesh runs from its checkout: no pnpm-workspace.yaml above ${start}`);
  }
}
