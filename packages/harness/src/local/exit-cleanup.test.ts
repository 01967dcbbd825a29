import { existsSync } from 'node:fs';
import test from 'ava';
import { execa } from 'execa';

/** A child that makes a temp dir through `tempDir`, prints its path, then waits or exits. */
const CHILD = `
  const { tempDir } = await import(process.argv[1]);
  const t = tempDir('zmesh-exit-test-');
  console.log(t.path);
  if (process.argv[2] === 'exit') process.exit(3);
  if (process.argv[2] === 'throw') setTimeout(() => { throw new Error('boom'); }, 10);
  else setInterval(() => {}, 1000);
`;

function child(mode: 'exit' | 'throw' | 'wait') {
  const module = new URL('./exit-cleanup.js', import.meta.url).href;
  return execa(process.execPath, ['--input-type=module', '-e', CHILD, module, mode], {
    reject: false,
    timeout: 20_000,
  });
}

async function pathOf(c: ReturnType<typeof child>): Promise<string> {
  return new Promise((resolve) => c.stdout?.once('data', (d: Buffer) => resolve(d.toString().trim())));
}

test('a temp dir is removed when the process is stopped by SIGTERM, which still ends it', async (t) => {
  const c = child('wait');
  const path = await pathOf(c);
  t.true(existsSync(path));
  c.kill('SIGTERM');
  const r = await c;
  t.is(r.signal, 'SIGTERM', 'the signal is re-raised: the process dies of it');
  t.false(existsSync(path));
});

test('a temp dir is removed on process.exit and on an uncaught error', async (t) => {
  for (const mode of ['exit', 'throw'] as const) {
    const c = child(mode);
    const path = await pathOf(c);
    const r = await c;
    t.not(r.exitCode, 0, mode);
    t.false(existsSync(path), mode);
  }
});
