import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import test from 'ava';
import { execa } from 'execa';

/** The repository's layering rules (.dependency-cruiser.cjs), as `make lint` runs them. */
const ROOT = resolve(import.meta.dirname, '../..');
const DEPCRUISE = join(ROOT, 'node_modules', '.bin', 'depcruise');
const CONFIG = join(ROOT, '.dependency-cruiser.cjs');

async function tree(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-layering-'));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  return dir;
}

/** depcruise with the real config on a fixture tree laid out like the repository. */
async function cruise(files: Record<string, string>) {
  const dir = await tree(files);
  try {
    return await execa(DEPCRUISE, ['--config', CONFIG, '--output-type', 'err', 'packages'], {
      cwd: dir,
      reject: false,
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('a ztunnel stage importing an earlier stage fails, naming the rule and the import', async (t) => {
  const r = await cruise({
    'packages/ztunnel/src/capture/listener.ts': 'export const PORT = 15001;\n',
    'packages/ztunnel/src/attribute/pods.ts':
      "import { PORT } from '../capture/listener.js';\nexport const p = PORT;\n",
  });
  t.not(r.exitCode, 0);
  t.regex(r.stdout, /ztunnel-stage-order-attribute/);
  t.regex(r.stdout, /attribute\/pods\.ts → packages\/ztunnel\/src\/capture\/listener\.ts/);
});

test('a later stage importing an earlier-named one the right way round passes', async (t) => {
  const r = await cruise({
    'packages/ztunnel/src/authz/store.ts': 'export const allow = true;\n',
    'packages/ztunnel/src/inbound/listener.ts':
      "import { allow } from '../authz/store.js';\nexport const a = allow;\n",
  });
  t.is(r.exitCode, 0, r.stdout);
});

test('a type-only back-import counts, as does a support folder importing a stage', async (t) => {
  const r = await cruise({
    'packages/ztunnel/src/pool/pool.ts': 'export class Pool {}\n',
    'packages/ztunnel/src/identity/drain.ts':
      "import type { Pool } from '../pool/pool.js';\nexport function drain(_p: Pool) {}\n",
  });
  t.not(r.exitCode, 0);
  t.regex(r.stdout, /ztunnel-support-imports-a-stage/);
});

test('a product importing the harness or test support fails, naming the rule', async (t) => {
  const r = await cruise({
    'packages/waypoint/src/proxy.ts':
      "import { runDemo } from '@zmesh/harness';\nexport const d = runDemo;\n",
    'packages/shared/src/testing/fake.ts': 'export const fake = 1;\n',
    'packages/shared/src/model.ts': "import { fake } from './testing/fake.js';\nexport const m = fake;\n",
    'packages/shared/src/model.test.ts':
      "import { fake } from './testing/fake.js';\nexport const t = fake;\n",
  });
  t.not(r.exitCode, 0);
  t.regex(r.stdout, /product-imports-harness: packages\/waypoint\/src\/proxy\.ts/);
  t.regex(r.stdout, /product-imports-test-support: packages\/shared\/src\/model\.ts/);
  t.notRegex(r.stdout, /model\.test\.ts/);
});

test('an import cycle fails, naming the rule', async (t) => {
  const r = await cruise({
    'packages/shared/src/a.ts': "import { b } from './b.js';\nexport const a = () => b;\n",
    'packages/shared/src/b.ts': "import { a } from './a.js';\nexport const b = () => a;\n",
  });
  t.not(r.exitCode, 0);
  t.regex(r.stdout, /no-circular/);
});

test('the repository passes its own rules (known violations aside)', async (t) => {
  const r = await execa(
    DEPCRUISE,
    ['--config', CONFIG, '--ignore-known', '--output-type', 'err', 'packages', 'test'],
    {
      cwd: ROOT,
      reject: false,
    },
  );
  t.is(r.exitCode, 0, r.stdout);
});
