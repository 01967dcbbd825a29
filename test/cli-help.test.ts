import { resolve } from 'node:path';
import test from 'ava';
import { execa } from 'execa';
import { pool } from './helpers/pool.js';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

/** `Commands:` of a help text: each subcommand's name (not `help`). */
function subcommands(help: string): string[] {
  const section = help.split(/\n\n/).find((p) => p.startsWith('Commands:')) ?? '';
  return section
    .split('\n')
    .slice(1)
    .map((l) => /^ {2}([a-z][\w-]*)/.exec(l)?.[1])
    .filter((n): n is string => n !== undefined && n !== 'help');
}

test('every command and subcommand: --help has a description, required flags marked, and an example', async (t) => {
  const seen: Array<{ path: string[]; help: string }> = [];
  let level: string[][] = [[]];
  while (level.length > 0) {
    const helps = await pool(level, 4, (path) =>
      execa(ZMESH, [...path, '--help'], { timeout: 60_000 }).then((r) => r.stdout),
    );
    const next: string[][] = [];
    level.forEach((path, i) => {
      const help = helps[i] as string;
      seen.push({ path, help });
      for (const sub of subcommands(help)) next.push([...path, sub]);
    });
    level = next;
  }
  // The commands #37 named must be among those walked (a walk that finds nothing proves nothing).
  const names = seen.map((s) => s.path.join(' '));
  for (const want of [
    'apply',
    'get',
    'describe',
    'proxy-status',
    'ztunnel-config',
    'x describe pod',
    'version',
  ])
    t.true(names.includes(want), `${want} not found in: ${names.join(', ')}`);
  for (const { path, help } of seen) {
    const what = `zmesh ${path.join(' ')} --help`;
    const [usage, , description] = help.split('\n');
    t.regex(usage ?? '', /^Usage: zmesh/, what);
    t.true((description ?? '').trim().length > 10, `${what}: no description`);
    t.regex(help, /\nExamples:\n {2}\$ zmesh /, `${what}: no example`);
  }
  // Options that must be given say so; the rest of their kind are parsed as required by commander.
  const helpOf = (path: string) => seen.find((s) => s.path.join(' ') === path)?.help ?? '';
  t.regex(helpOf('apply'), /-f, --file <file\|dir\|->\s+\(required\)/);
  t.regex(helpOf('ztunnel'), /--node <name>\s+\(required\)/);
  t.regex(helpOf('x describe pod'), /Usage: zmesh x describe pod \[options\] <pod>/);
});

test('help piped into a reader that leaves early ends quietly, without a stack trace', async (t) => {
  const r = await execa('sh', ['-c', `"${ZMESH}" waypoint --help | head -1`], { reject: false });
  t.is(r.stdout, 'Usage: zmesh waypoint [options]');
  t.notRegex(r.stderr, /EPIPE|at /);
});
