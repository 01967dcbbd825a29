import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import test from 'ava';

const loggerModule = fileURLToPath(new URL('./logger.js', import.meta.url));

/** Runs `body` in a fresh node process with the built logger imported as `L`; returns its stderr lines. */
function run(body: string): string[] {
  const script = `const L = await import(${JSON.stringify(loggerModule)});\n${body}`;
  // The levels start at info whatever the suite runs with (scripts/test.sh sets ZMESH_LOG=error).
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ZMESH_LOG')));
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
    env: { ...env, ZMESH_LOG: 'info' },
  });
  if (r.status !== 0) throw new Error(`child exited ${r.status}: ${r.stderr}`);
  return r.stderr.split('\n').filter((l) => l.length > 0);
}

test('access-log lines still gathered are written at exit, whole and in order', (t) => {
  const lines = run(`
    const log = L.accessLogger('waypoint');
    for (let i = 0; i < 3; i++) log.info({ i }, 'request');
    process.exit(0);
  `);
  t.deepEqual(
    lines.map((l) => JSON.parse(l)).map((o) => [o.scope, o.msg, o.i]),
    [
      ['waypoint', 'request', 0],
      ['waypoint', 'request', 1],
      ['waypoint', 'request', 2],
    ],
  );
});

test('access-log lines interleave with other loggers only at line boundaries', (t) => {
  // 4 KiB fills a batch several times over, so batches are written between the other lines.
  const lines = run(`
    const access = L.accessLogger('waypoint');
    const other = L.logger('cli');
    for (let i = 0; i < 300; i++) { access.info({ i, pad: 'x'.repeat(100) }, 'request'); if (i % 7 === 0) other.info({ i }, 'other'); }
  `);
  const parsed = lines.map((l) => JSON.parse(l) as { msg: string; i: number });
  t.deepEqual(
    parsed.filter((o) => o.msg === 'request').map((o) => o.i),
    Array.from({ length: 300 }, (_, i) => i),
  );
  t.is(parsed.filter((o) => o.msg === 'other').length, 43);
});

test('the access log follows its scope level, set before or after it is made', (t) => {
  const lines = run(`
    L.logger('waypoint');
    L.setLogLevel('waypoint', 'warn');
    const log = L.accessLogger('waypoint');
    log.info('dropped');
    L.setLogLevel('waypoint', 'info');
    log.info('kept');
    L.setLogLevel('waypoint', 'error');
    log.info('dropped too');
  `);
  t.deepEqual(
    lines.map((l) => (JSON.parse(l) as { msg: string }).msg),
    ['kept'],
  );
});

test('one key per field: ISO-8601 time, the level as a word, and a call cannot double level or scope', (t) => {
  const [line] = run(`L.logger('admin').info({ scope: 'outbound', level: 'debug', n: 1 }, 'changed');`);
  t.notRegex(line!, /"level":.*"level":/);
  t.notRegex(line!, /"scope":.*"scope":/);
  const o = JSON.parse(line!) as Record<string, unknown>;
  t.is(o.level, 'info');
  t.is(o.scope, 'admin');
  t.is(o.scope_field, 'outbound');
  t.is(o.level_field, 'debug');
  t.regex(String(o.time), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
});

test('a level set for everyone leaves scopes set on their own; unknown scopes and levels are refused with the choices', (t) => {
  const lines = run(`
    const a = L.logger('inbound');
    const b = L.logger('outbound');
    L.setLogLevel('inbound', 'debug');
    L.setLogLevel('*', 'error');
    a.debug('inbound kept its debug');
    b.info('outbound follows the default: dropped');
    const bad = L.setLogLevel('nosuchscope', 'info');
    const level = L.setLogLevel('inbound', 'loud');
    process.stderr.write(JSON.stringify({ bad, level }) + '\\n');
  `);
  t.deepEqual(
    lines.slice(0, -1).map((l) => (JSON.parse(l) as { msg: string }).msg),
    ['inbound kept its debug'],
  );
  const { bad, level } = JSON.parse(lines.at(-1)!) as {
    bad: { ok: boolean; error: string };
    level: { error: string };
  };
  t.false(bad.ok);
  t.regex(bad.error, /unknown scope "nosuchscope"; scopes: \*, inbound, outbound/);
  t.regex(level.error, /unknown level "loud"; levels: trace, debug/);
});

test('ZMESH_LOG_FORMAT=pretty writes a compact human line', (t) => {
  const script = `const L = await import(${JSON.stringify(loggerModule)});\nL.logger('cli').warn({ port: 15000 }, 'port taken');`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    env: { ...process.env, ZMESH_LOG: 'info', ZMESH_LOG_FORMAT: 'pretty' },
  });
  t.regex(r.stderr.trim(), /^\d{2}:\d{2}:\d{2}\.\d{3} WARN {2}cli {2}port taken {2}port=15000$/);
});

/** util-linux `script` gives a child a pseudo-terminal; without it the terminal case cannot run. */
const hasScript = spawnSync('script', ['--version']).error === undefined;

(hasScript ? test : test.skip)(
  `stderr on a terminal gets the human line without ZMESH_LOG_FORMAT; json forces JSON there${hasScript ? '' : ' (skipped: util-linux `script` is not installed)'}`,
  (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'zmesh-log-tty-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'log.mjs');
    writeFileSync(
      file,
      `const L = await import(${JSON.stringify(loggerModule)});\nL.logger('cli').warn({ port: 15000 }, 'port taken');\n`,
    );
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ZMESH_LOG')));
    // `script`'s stdout is what the terminal showed.
    const onTty = (format: string | undefined) =>
      spawnSync('script', ['-qec', `'${process.execPath}' '${file}'`, '/dev/null'], {
        encoding: 'utf8',
        timeout: 20_000,
        env: { ...env, ZMESH_LOG: 'info', ...(format ? { ZMESH_LOG_FORMAT: format } : {}) },
      });
    const pretty = onTty(undefined);
    t.is(pretty.status, 0, pretty.stdout);
    t.regex(pretty.stdout.trim(), /^\d{2}:\d{2}:\d{2}\.\d{3} WARN {2}cli {2}port taken {2}port=15000$/);
    t.regex(
      onTty('json').stdout.trim(),
      /^\{"level":"warn","time":"\d{4}-.*"scope":"cli".*"msg":"port taken"\}$/,
    );
  },
);
