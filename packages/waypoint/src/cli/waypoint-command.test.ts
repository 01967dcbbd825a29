import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { runWaypoint } from './waypoint-command.js';

/** Runs `fn` with stderr captured; returns what was written. */
async function stderrOf(fn: () => Promise<void>): Promise<string> {
  const stderr = process.stderr.write;
  const lines: string[] = [];
  process.stderr.write = ((chunk: string) => {
    lines.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    await fn();
  } finally {
    process.stderr.write = stderr;
  }
  return lines.join('');
}

test.serial(
  'an invalid config file exits 1 with ZM_ERR_CONFIG_INVALID before anything listens',
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-wp-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const file = join(dir, 'bad.yaml');
    await writeFile(file, 'waypoint: { name: Bad_Name }\nhttpRoutes: [{ parentRefs: [] }]\n');
    const text = await stderrOf(async () => {
      t.is(await runWaypoint({ config: file, address: '127.66.0.1', caDir: dir }), 1);
      // Without --address and --ca-dir it is a usage error, judged before the file is read.
      t.is(await runWaypoint({ config: file }), 2);
    });
    t.regex(text, /ZM_ERR_CONFIG_INVALID/);
    t.regex(text, /waypoint\.name: must match/);
    t.regex(text, /waypoint\.namespace/);
    t.regex(text, /parentRefs: needs at least one Service/);
  },
);

test.serial('a --warm-up-requests that is not a count exits 2 and says what it wants', async (t) => {
  const text = await stderrOf(async () => {
    for (const bad of ['-1', 'many', '1e3', ''])
      t.is(
        await runWaypoint({ config: 'unused.yaml', address: '127.66.0.1', caDir: '.', warmUpRequests: bad }),
        2,
      );
  });
  t.regex(text, /--warm-up-requests: want a count of requests \(0 skips the warm-up\), got many/);
});

test.serial('a --path-normalization that is not one of Istio modes exits 2 and names them', async (t) => {
  const text = await stderrOf(async () => {
    for (const bad of ['NONE', 'base', 'merge'])
      t.is(
        await runWaypoint({
          config: 'unused.yaml',
          address: '127.66.0.1',
          caDir: '.',
          pathNormalization: bad,
        }),
        2,
      );
  });
  t.regex(text, /--path-normalization: want one of BASE, MERGE_SLASHES, DECODE_AND_MERGE_SLASHES, got NONE/);
});

test.serial('a --num-trusted-proxies that is not a hop count exits 2 and says what it wants', async (t) => {
  const text = await stderrOf(async () => {
    for (const bad of ['-1', 'two', '100', '1.5'])
      t.is(
        await runWaypoint({
          config: 'unused.yaml',
          address: '127.66.0.1',
          caDir: '.',
          numTrustedProxies: bad,
        }),
        2,
      );
  });
  t.regex(text, /--num-trusted-proxies: want a count of proxy hops \(0 to 99\), got two/);
});
