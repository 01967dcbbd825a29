// The proxies' bundles. bin/zmesh runs `ztunnel` and `waypoint` each from an esbuild bundle
// of its package's entry (packages/<proxy>/dist/cli/main.js) instead of the ~450 modules
// under packages/*/dist and node_modules: each module keeps its whole source text and its
// own module record in the V8 heap, and an idle 100-pod ztunnel held ~7 MB less resident
// from the bundle (docs/performance.md, "Memory"). Identifiers are kept, so stack
// traces name real functions; the bundle carries no source map, since `--enable-source-maps`
// would load it whole into every proxy.
// `ZMESH_NO_BUNDLE=1 bin/zmesh ztunnel …` runs from dist/ with source maps instead.
import { rmSync } from 'node:fs';
import { build } from 'esbuild';

for (const proxy of ['ztunnel', 'waypoint']) {
  const outdir = `packages/${proxy}/dist/bundle`;
  rmSync(outdir, { recursive: true, force: true });
  await build({
    entryPoints: [`packages/${proxy}/dist/cli/main.js`],
    outdir,
    bundle: true,
    // The daemon's dynamic import becomes its own chunk, loaded once the flags are parsed.
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    minifyWhitespace: true,
    minifySyntax: true,
    // koffi loads a native addon from its own package.
    external: ['koffi'],
    // CommonJS dependencies (grpc-js, protobufjs, pino) call require() for Node's modules.
    banner: {
      js: "import { createRequire as zmeshRequire } from 'node:module'; const require = zmeshRequire(import.meta.url);",
    },
    logLevel: 'warning',
  });
}
