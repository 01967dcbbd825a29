import test from 'ava';
import type { BenchReport, Runtime } from './bench-results.js';
import { resolveRuntimes, runtimeEnv, runtimePathName, runtimeTable } from './runtimes.js';

test('a runtime is a node found by major version or path, with the flags after it', async (t) => {
  const major = process.versions.node.split('.')[0]!;
  // The bench itself runs on the checkout's Node (make, bin/zmesh), so nodeNN finds one.
  const [byMajor, byPath] = await resolveRuntimes(
    ` node${major} ,${process.execPath} --max-semi-space-size=8 --no-maglev`,
  );
  t.is(byMajor!.spec, `node${major}`);
  t.true(byMajor!.version.startsWith(`v${major}.`), byMajor!.version);
  t.deepEqual(byMajor!.flags, []);
  t.is(byPath!.node, process.execPath);
  t.is(byPath!.version, process.version);
  t.deepEqual(byPath!.flags, ['--max-semi-space-size=8', '--no-maglev']);
  t.is(
    runtimePathName('pair', byPath!),
    `pair (node ${process.version} --max-semi-space-size=8 --no-maglev)`,
  );
});

test('a bad --runtimes item is refused with the item and the reason', async (t) => {
  const reason = async (list: string) => (await t.throwsAsync(resolveRuntimes(list)))?.message;
  t.is(await reason(' , '), '--runtimes: no runtime given');
  t.regex((await reason('node1')) ?? '', /^--runtimes: node1: no Node 1 among .*\(give its path instead\)$/);
  t.is(await reason('bun'), '--runtimes: bun: bun is neither nodeNN nor a path to a node binary');
  t.is(
    await reason('/nonexistent/node'),
    '--runtimes: /nonexistent/node: /nonexistent/node is not a runnable node',
  );
  t.is(
    await reason(`${process.execPath} 8`),
    `--runtimes: ${process.execPath} 8: 8 is not a node flag (--…)`,
  );
  t.is(
    await reason(`${process.execPath},${process.execPath}`),
    `--runtimes: ${process.execPath} given twice`,
  );
});

test("bin/zmesh's environment for a runtime puts its flags after the caller's", (t) => {
  const r: Runtime = { spec: 'x', node: '/n', version: 'v1.0.0', flags: ['--a', '--b'] };
  const saved = process.env.ZMESH_NODE_FLAGS;
  t.teardown(() => {
    if (saved === undefined) delete process.env.ZMESH_NODE_FLAGS;
    else process.env.ZMESH_NODE_FLAGS = saved;
  });
  delete process.env.ZMESH_NODE_FLAGS;
  t.deepEqual(runtimeEnv(r), { ZMESH_NODE: '/n', ZMESH_NODE_FLAGS: '--a --b' });
  t.deepEqual(runtimeEnv({ ...r, flags: [] }), { ZMESH_NODE: '/n' });
  process.env.ZMESH_NODE_FLAGS = '--cpu-prof';
  t.deepEqual(runtimeEnv(r), { ZMESH_NODE: '/n', ZMESH_NODE_FLAGS: '--cpu-prof --a --b' });
});

test('the runtime table divides each runtime by the first, row by row', (t) => {
  const old: Runtime = { spec: 'node20', node: '/a', version: 'v20.1.0', flags: [] };
  const cur: Runtime = { spec: 'node24', node: '/b', version: 'v24.2.0', flags: [] };
  const row = (r: Runtime, workload: string, value: number) => ({
    path: runtimePathName('pair', r),
    workload,
    metric: 'RSS',
    value,
    unit: 'MB',
  });
  const report = {
    results: [row(old, 'idle', 50), row(cur, 'idle', 75), row(cur, 'after bulk traffic', 90)],
    paths: [],
    run: {},
  } as unknown as BenchReport;
  t.deepEqual(runtimeTable(report, 'pair', [old, cur]).split('\n'), [
    '| workload           | metric   | node20 | node24 | node24 ÷ node20 |',
    '| ------------------ | -------- | ------ | ------ | --------------- |',
    '| idle               | RSS (MB) | 50.0   | 75.0   | 1.50×           |',
    '| after bulk traffic | RSS (MB) | -      | 90.0   | -               |',
  ]);
});
