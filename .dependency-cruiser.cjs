// The layering ARCHITECTURE.md states, checked by `make lint` (dependency-cruiser).
// test/layering.test.ts runs this config on a fixture tree with a wrong import.

/** ztunnel's folders along the data path: a stage imports later stages, never an earlier one. */
const STAGES = ['capture', 'attribute', 'outbound', 'pool', 'hbone', 'inbound', 'authz', 'forward'];
const ZTUNNEL = '^packages/ztunnel/src/';
/** Test support: `src/testing/` in each package (exported to other packages' tests as `@zmesh/<pkg>/testing`). */
const TEST_SUPPORT = '(^packages/[^/]+/(src|dist)/testing/|^@zmesh/[^/]+/testing$)';
/** Test code: ava's tests and the repository's test helpers. */
const TEST_CODE = '(\\.test\\.ts$|^test/)';

const stageOrder = STAGES.slice(1).map((stage, i) => ({
  name: `ztunnel-stage-order-${stage}`,
  comment: `ztunnel's ${stage} stage imports an earlier stage (${STAGES.slice(0, i + 1).join(', ')}); the data path runs ${STAGES.join(' → ')} and a stage imports only later ones`,
  severity: 'error',
  from: { path: `${ZTUNNEL}${stage}/` },
  to: { path: `${ZTUNNEL}(${STAGES.slice(0, i + 1).join('|')})/` },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...stageOrder,
    {
      name: 'ztunnel-support-imports-a-stage',
      comment:
        "ztunnel's support folders (tenancy, identity, state, admin) serve the stages and must not import a stage or the Ztunnel class: take a callback or an interface the stage satisfies",
      severity: 'error',
      from: { path: `${ZTUNNEL}(tenancy|identity|state)/`, pathNot: TEST_CODE },
      to: { path: `${ZTUNNEL}((${STAGES.join('|')})/|ztunnel\\.ts$)` },
    },
    {
      name: 'product-imports-harness',
      comment:
        'a product package (shared, ztunnel, waypoint, control-plane, node-agent) imports @zmesh/harness',
      severity: 'error',
      from: { path: '^packages/(shared|ztunnel|waypoint|control-plane|node-agent)/' },
      to: { path: '(^packages/harness/|^@zmesh/harness)' },
    },
    {
      name: 'product-imports-test-support',
      comment: 'code that is not a test imports test support (src/testing/, @zmesh/<pkg>/testing)',
      severity: 'error',
      from: { path: '^packages/[^/]+/src/', pathNot: `(${TEST_CODE}|/src/testing/)` },
      to: { path: TEST_SUPPORT },
    },
    {
      name: 'no-circular',
      comment: 'a module reaches itself through imports that run (type-only imports are erased)',
      severity: 'error',
      from: { path: '^packages/[^/]+/src/' },
      to: { circular: true, viaOnly: { dependencyTypesNot: ['type-only'] } },
    },
  ],
  options: {
    doNotFollow: { path: ['node_modules', '^packages/[^/]+/dist/'] },
    exclude: { path: ['/dist/', '\\.d\\.ts$'] },
    parser: 'swc',
    // Type-only imports count: a stage that names an earlier stage's type depends on it.
    tsPreCompilationDeps: true,
    // Sources import siblings as './x.js' (NodeNext); the file on disk is x.ts.
    enhancedResolveOptions: {
      extensions: ['.ts', '.js', '.json'],
      exportsFields: ['exports'],
      conditionNames: ['import', 'types', 'default'],
    },
  },
};
