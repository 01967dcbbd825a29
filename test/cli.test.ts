import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CertificateAuthority } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { execa } from 'execa';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

test('bin/zmesh --help lists the subcommands', async (t) => {
  const r = await execa(ZMESH, ['--help']);
  for (const cmd of ['ztunnel', 'demo', 'bench']) t.regex(r.stdout, new RegExp(`\\b${cmd}\\b`));
});

test('zmesh ztunnel with a config file it cannot read exits 1 with one line naming the file and reason', async (t) => {
  const r = await execa(
    ZMESH,
    ['ztunnel', '--config', '/nonexistent.yaml', '--node', 'n', '--ca-dir', '/tmp'],
    { reject: false },
  );
  t.is(r.exitCode, 1);
  t.regex(
    r.stderr,
    /^zmesh ztunnel: ZM_ERR_CONFIG_INVALID: invalid config \/nonexistent\.yaml: cannot read: ENOENT/,
  );
  t.is(r.stderr.trim().split('\n').length, 1);
});

test('zmesh ztunnel refuses a bad access-log flag with one line naming it', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['--access-log', 'maybe'], /^zmesh ztunnel: --access-log: want off, on or sample:F/],
    [['--access-log-namespaces', 'shop'], /^zmesh ztunnel: --access-log-namespaces: want namespace=mode/],
    [['--access-log-rate', 'lots'], /^zmesh ztunnel: --access-log-rate: want lines per second/],
  ];
  for (const [flags, want] of cases) {
    const r = await execa(
      ZMESH,
      ['ztunnel', '--node', 'n', '--config', 'x.yaml', '--ca-dir', '/tmp', ...flags],
      {
        reject: false,
      },
    );
    t.is(r.exitCode, 2, flags.join(' '));
    t.regex(r.stderr.trim(), want);
    t.is(r.stderr.trim().split('\n').length, 1, 'one line');
  }
});

test('zmesh harness bypass refuses to run zero attempts (nothing proven is not a pass)', async (t) => {
  const r = await execa(ZMESH, ['harness', 'bypass', '--only', 'no-such-attempt'], { reject: false });
  t.is(r.exitCode, 2);
  t.regex(r.stderr, /no attempt id contains "no-such-attempt"/);
});

/** Listens on `host:port` so that a daemon started next finds it taken. */
async function takePort(t: ExecutionContext, host: string, port: number): Promise<void> {
  const holder = createServer();
  await new Promise<void>((resolve, reject) => {
    holder.once('error', reject);
    holder.listen({ host, port }, resolve);
  });
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())));
}

/**
 * A port already taken at start: one line with the stable code, the listener, address and
 * errno, exit 1, no stack trace. The daemon exits on its own within the timeout, so the
 * listeners it had opened before the failing one were closed (an open one keeps Node running).
 */
function assertBindFailure(
  t: ExecutionContext,
  r: { exitCode?: number; stderr: string; timedOut: boolean },
  listener: string,
  address: string,
): void {
  t.false(r.timedOut, 'the daemon did not exit by itself: something it opened is still open');
  t.is(r.exitCode, 1, r.stderr);
  const lines = r.stderr.split('\n').filter((l) => l.includes('ZM_ERR_LISTEN_BIND'));
  t.is(lines.length, 1, r.stderr);
  t.regex(
    lines[0]!,
    new RegExp(`${listener} listener cannot bind ${address.replaceAll('.', '\\.')}: EADDRINUSE`),
  );
  t.notRegex(r.stderr, /setupListenHandle|\n\s+at /);
}

// 127.86.0.0/16 is these tests'.
test('zmesh ztunnel whose readiness port is taken exits 1 naming it, after closing admin and metrics', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-bind-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
  await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
  await writeFile(join(dir, 'mesh.yaml'), 'workloads: []\n');
  await takePort(t, '127.86.0.1', 15021);
  const r = await execa(
    ZMESH,
    [
      'ztunnel',
      '--config',
      join(dir, 'mesh.yaml'),
      '--node',
      'n',
      '--address',
      '127.86.0.1',
      '--ca-dir',
      dir,
    ],
    { reject: false, timeout: 20_000 },
  );
  assertBindFailure(t, r, 'readiness', '127.86.0.1:15021');
});

test('zmesh waypoint whose metrics port is taken exits 1 naming it, after closing its HBONE listener', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-bind-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
  await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
  await writeFile(join(dir, 'wp.yaml'), 'waypoint: { name: wp, namespace: shop }\n');
  await takePort(t, '127.86.0.2', 15020);
  const r = await execa(
    ZMESH,
    [
      'waypoint',
      '--config',
      join(dir, 'wp.yaml'),
      '--ca-dir',
      dir,
      '--address',
      '127.86.0.2',
      '--warm-up-requests',
      '0',
    ],
    { reject: false, timeout: 20_000 },
  );
  assertBindFailure(t, r, 'metrics', '127.86.0.2:15020');
});

test('zmesh control-plane whose admin port is taken exits 1 naming it, after closing xDS', async (t) => {
  await takePort(t, '127.86.0.3', 15014);
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-admin-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'token'), 'a-long-enough-admin-token-0123456789\n', { mode: 0o600 });
  const r = await execa(
    ZMESH,
    ['control-plane', '--host', '127.86.0.3', '--no-state-dir'].concat([
      '--admin-port',
      '15014',
      '--admin-token-file',
      join(dir, 'token'),
    ]),
    { reject: false, timeout: 20_000 },
  );
  assertBindFailure(t, r, 'control-plane admin', '127.86.0.3:15014');
});
