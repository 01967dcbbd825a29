import { resolve } from 'node:path';
import test from 'ava';
import { execa } from 'execa';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

test('bin/zmesh --help lists the subcommands', async (t) => {
  const r = await execa(ZMESH, ['--help']);
  for (const cmd of ['ztunnel', 'demo', 'bench']) t.regex(r.stdout, new RegExp(`\\b${cmd}\\b`));
});

test('zmesh ztunnel with an invalid config exits 2 naming file, path and reason', async (t) => {
  const r = await execa(
    ZMESH,
    ['ztunnel', '--config', '/nonexistent.yaml', '--node', 'n', '--ca-dir', '/tmp'],
    { reject: false },
  );
  t.is(r.exitCode, 2);
  t.regex(r.stderr, /\/nonexistent\.yaml: cannot read/);
});

test('zmesh harness bypass refuses to run zero attempts (nothing proven is not a pass)', async (t) => {
  const r = await execa(ZMESH, ['harness', 'bypass', '--only', 'no-such-attempt'], { reject: false });
  t.is(r.exitCode, 2);
  t.regex(r.stderr, /no attempt id contains "no-such-attempt"/);
});
