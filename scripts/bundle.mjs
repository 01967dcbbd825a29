// The proxies' bundle. bin/zmesh runs `ztunnel` and `waypoint` from one esbuild bundle of
// the CLI instead of the ~450 modules under packages/*/dist and node_modules: each module
// keeps its whole source text and its own module record in the V8 heap, and an idle
// 100-pod ztunnel held ~7 MB less resident from the bundle (docs/performance.md,
// "Memory"). Identifiers are kept, so stack traces name real functions; the bundle carries
// no source map, since `--enable-source-maps` would load it whole into every proxy.
// `ZMESH_NO_BUNDLE=1 bin/zmesh ztunnel …` runs from dist/ with source maps instead.
import { rmSync } from 'node:fs';
import { build } from 'esbuild';

const outdir = 'packages/harness/dist/bundle';
rmSync(outdir, { recursive: true, force: true });
await build({
  entryPoints: ['packages/harness/dist/cli/main.js'],
  outdir,
  bundle: true,
  // Each command's dynamic import becomes its own chunk: a ztunnel loads none of the
  // bench's, the cluster's or the control plane's code.
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minifyWhitespace: true,
  minifySyntax: true,
  // koffi loads a native addon from its own package; the others are the bench's charts.
  external: ['koffi', '@resvg/resvg-js', 'vega', 'vega-lite'],
  // CommonJS dependencies (grpc-js, protobufjs, pino) call require() for Node's modules.
  banner: {
    js: "import { createRequire as zmeshRequire } from 'node:module'; const require = zmeshRequire(import.meta.url);",
  },
  logLevel: 'warning',
});
