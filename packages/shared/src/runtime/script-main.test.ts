import { pathToFileURL } from 'node:url';
import test from 'ava';
import { isScriptMain } from './script-main.js';

function withArgv1<T>(script: string, run: () => T): T {
  const saved = process.argv[1];
  process.argv[1] = script;
  try {
    return run();
  } finally {
    process.argv[1] = saved as string;
  }
}

test('a module started as the script is its main', (t) => {
  const script = '/repo/packages/harness/dist/bench/authz-bench.js';
  t.true(withArgv1(script, () => isScriptMain(pathToFileURL(script).href, 'authz-bench.js')));
});

test("a module bundled into the entry chunk does not take the entry's URL for its own", (t) => {
  // In the proxies' bundle, authz-bench's code may sit in main.js, the script node ran.
  const entry = '/repo/packages/ztunnel/dist/bundle/main.js';
  t.false(withArgv1(entry, () => isScriptMain(pathToFileURL(entry).href, 'authz-bench.js')));
});

test('another module is not the main', (t) => {
  t.false(
    withArgv1('/repo/packages/harness/dist/bench/authz-bench.js', () =>
      isScriptMain(
        'file:///repo/packages/ztunnel/dist/authz/authorization-store.js',
        'authorization-store.js',
      ),
    ),
  );
});
