// The proxies' bundles. bin/zmesh runs `ztunnel` and `waypoint` each from an esbuild bundle
// of its package's entry (packages/<proxy>/dist/cli/main.js) instead of the ~450 modules
// under packages/*/dist and node_modules: each module keeps its whole source text and its
// own module record in the V8 heap, and an idle 100-pod ztunnel held ~7 MB less resident
// from the bundle (docs/performance.md, "Memory"). Identifiers are kept, so stack
// traces name real functions; the bundle carries no source map, since `--enable-source-maps`
// would load it whole into every proxy.
// `ZMESH_NO_BUNDLE=1 bin/zmesh ztunnel …` runs from dist/ with source maps instead.
//
// `node scripts/bundle.mjs --image DIR` (scripts/image.sh) lays out the image's tree under DIR
// instead: the proxies' bundles where bin/zmesh looks for them, and the control plane's, the
// node agent's and the operator CLI's entries bundled in place of their dist/cli/main.js
// (and the node agent's CNI plugin script beside it, as it is), so the image holds
// no node_modules but koffi (a native addon, copied by image.sh).
import { cpSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { build } from 'esbuild';

const imageAt = process.argv.indexOf('--image');
const imageRoot = imageAt === -1 ? undefined : process.argv[imageAt + 1];
if (imageAt !== -1 && !imageRoot) throw new Error('bundle.mjs: --image needs a directory');

const entries = [
  { pkg: 'ztunnel', out: 'dist/bundle' },
  { pkg: 'waypoint', out: 'dist/bundle' },
  ...(imageRoot
    ? [
        { pkg: 'control-plane', out: 'dist/cli' },
        { pkg: 'node-agent', out: 'dist/cli' },
        { pkg: 'harness', out: 'dist/cli' },
      ]
    : []),
];

/**
 * The etcd client (`--store etcd://`, loaded only then) reads its .proto files from its own
 * package at run time (`${__dirname}/../proto`): copied beside the bundle, and the path
 * pointed there.
 */
function etcdProtos(outdir) {
  const pkg = join(
    dirname(createRequire(join(process.cwd(), 'packages/control-plane/package.json')).resolve('etcd3')),
    '..',
  );
  return {
    name: 'etcd-protos',
    setup(b) {
      b.onLoad({ filter: /etcd3[\\/]lib[\\/]connection-pool\.js$/ }, (args) => {
        const text = readFileSync(args.path, 'utf8');
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the text of etcd3's source
        const from = '`${__dirname}/../proto/rpc.proto`';
        if (!text.includes(from)) throw new Error(`etcd3 changed how it finds its protos: ${args.path}`);
        cpSync(join(pkg, 'proto'), join(outdir, 'etcd3-proto'), { recursive: true });
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the replacement source text
        return { contents: text.replace(from, '`${zmeshBundleDir}/etcd3-proto/rpc.proto`'), loader: 'js' };
      });
    },
  };
}

// The dashboard page's script (`zmesh dashboard`): browser code with its libraries, bundled
// at build time so the page loads nothing from elsewhere at run time.
await build({
  entryPoints: ['packages/harness/page/app.js'],
  outfile: join(imageRoot ?? '.', 'packages/harness/dist/dashboard/app.js'),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'chrome120',
  minify: true,
  logLevel: 'warning',
});
// (Before the proxies' bundles: bin/zmesh runs a bundle only if it is newer than dist/.)

for (const { pkg, out } of entries) {
  const outdir = join(imageRoot ?? '.', 'packages', pkg, out);
  rmSync(outdir, { recursive: true, force: true });
  await build({
    // ztunnel's worker threads (`--workers N`) start from their own entry beside main.js.
    entryPoints: {
      main: `packages/${pkg}/dist/cli/main.js`,
      ...(pkg === 'ztunnel' ? { 'worker-entry': 'packages/ztunnel/dist/workers/worker-entry.js' } : {}),
    },
    outdir,
    bundle: true,
    // The daemon's dynamic import becomes its own chunk, loaded once the flags are parsed.
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    minifyWhitespace: true,
    minifySyntax: true,
    // koffi loads a native addon from its own package; the harness's chart renderer is a
    // native addon too, and only the bench needs it (not in the image).
    external: ['koffi', '@resvg/resvg-js'],
    plugins: pkg === 'control-plane' ? [etcdProtos(outdir)] : [],
    // CommonJS dependencies (grpc-js, protobufjs, pino) call require() for Node's modules;
    // zmeshBundleDir is where a bundled dependency finds files copied beside the bundle.
    banner: {
      js: "import { createRequire as zmeshRequire } from 'node:module'; const require = zmeshRequire(import.meta.url); const zmeshBundleDir = import.meta.dirname;",
    },
    logLevel: 'warning',
  });
}

// The node agent copies its CNI plugin (Node's modules only, no bundle needed) from dist/cni/.
if (imageRoot) {
  const plugin = 'packages/node-agent/dist/cni/zmesh-cni.js';
  cpSync(plugin, join(imageRoot, plugin));
}
