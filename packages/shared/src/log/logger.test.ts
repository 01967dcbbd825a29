import { spawnSync } from 'node:child_process';
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
    L.setLogLevel('waypoint', 'warn');
    const log = L.accessLogger('waypoint');
    log.info('dropped');
    L.setLogLevel('waypoint', 'info');
    log.info('kept');
    L.setLogLevel('*', 'error');
    log.info('dropped too');
  `);
  t.deepEqual(
    lines.map((l) => (JSON.parse(l) as { msg: string }).msg),
    ['kept'],
  );
});
