import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { runWaypoint } from './waypoint-command.js';

test('an invalid config file exits 2 before anything listens', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-wp-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'bad.yaml');
  await writeFile(file, 'waypoint: { name: Bad_Name }\nhttpRoutes: [{ parentRefs: [] }]\n');
  const stderr = process.stderr.write;
  const lines: string[] = [];
  process.stderr.write = ((chunk: string) => {
    lines.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    t.is(await runWaypoint({ config: file, address: '127.66.0.1', caDir: dir }), 2);
    t.is(await runWaypoint({ config: file }), 2);
  } finally {
    process.stderr.write = stderr;
  }
  const text = lines.join('');
  t.regex(text, /waypoint\.name: must match/);
  t.regex(text, /waypoint\.namespace/);
  t.regex(text, /parentRefs: needs at least one Service/);
});
