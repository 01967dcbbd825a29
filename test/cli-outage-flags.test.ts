import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import test from 'ava';
import { execa } from 'execa';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

test('zmesh control-plane --socket serves xDS and the CA on a 0600 Unix socket', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-sock-'));
  const socket = join(dir, 'xds.sock');
  const cp = execa(
    ZMESH,
    ['control-plane', '--socket', socket, '--admin-socket', join(dir, 'admin.sock'), '--no-state-dir'],
    {
      reject: false,
    },
  );
  t.teardown(async () => {
    cp.kill('SIGTERM');
    await cp;
    await rm(dir, { recursive: true, force: true });
  });
  const line = await new Promise<string>((resolve) => {
    let seen = '';
    cp.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes('admin on')) resolve(seen);
    });
  });
  t.regex(line, new RegExp(`xDS and CA on unix:${socket}`));
  t.is((await stat(socket)).mode & 0o777, 0o600);
});

test('zmesh ztunnel refuses --persist-keys without --xds, a non-tmpfs or open key directory, and a bad --xds-backoff', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-keys-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const token = join(dir, 'token');
  const roots = join(dir, 'roots.pem');
  await writeFile(token, 'zmn1.x.y\n');
  const noXds = await execa(
    ZMESH,
    ['ztunnel', '--node', 'n', '--config', '/dev/null', '--ca-dir', dir, '--persist-keys', dir],
    { reject: false },
  );
  t.is(noXds.exitCode, 2);
  t.regex(noXds.stderr, /--persist-keys needs --xds/);
  const backoff = await execa(
    ZMESH,
    [
      'ztunnel',
      '--node',
      'n',
      '--xds',
      'unix:/nonexistent',
      '--token-file',
      token,
      '--roots-file',
      roots,
      '--xds-backoff',
      '5',
    ],
    { reject: false },
  );
  t.is(backoff.exitCode, 2);
  t.regex(backoff.stderr, /--xds-backoff: want initialMs:maxMs/);
  // A real roots file is needed to get as far as the key directory check.
  const { CertificateAuthority } = await import('@zmesh/shared');
  await writeFile(roots, (await CertificateAuthority.create({ trustDomain: 'cluster.local' })).rootPem);
  const unsafe = await execa(
    ZMESH,
    [
      'ztunnel',
      '--node',
      'n',
      '--xds',
      'unix:/nonexistent',
      '--token-file',
      token,
      '--roots-file',
      roots,
      '--persist-keys',
      tmpdir(),
    ],
    { reject: false, timeout: 20_000 },
  );
  t.is(unsafe.exitCode, 2);
  t.regex(unsafe.stderr, /refusing to keep keys in .*: .*(not tmpfs|open to others)/);
});

test('zmesh ztunnel refuses a per-tenant quota flag that is not a positive integer', async (t) => {
  for (const [flag, value] of [
    ['--tenant-connect-rate', 'fast'],
    ['--tenant-connect-burst', '0'],
    ['--tenant-max-connections', '-3'],
  ] as const) {
    const r = await execa(ZMESH, ['ztunnel', '--node', 'n', flag, value], { reject: false });
    t.is(r.exitCode, 2, flag);
    t.regex(r.stderr, new RegExp(`${flag}: want a positive integer, got ${value}`));
  }
});

test('zmesh ztunnel refuses an HBONE admission limit that is not a positive integer', async (t) => {
  for (const [flag, value] of [
    ['--max-preauth-per-source', 'many'],
    ['--max-preauth', '0'],
    ['--handshake-timeout-ms', '-1'],
    ['--fd-reserve', '2.5'],
    ['--ping-interval-ms', '0'],
  ] as const) {
    const r = await execa(ZMESH, ['ztunnel', '--node', 'n', flag, value], { reject: false });
    t.is(r.exitCode, 2, flag);
    t.regex(r.stderr, new RegExp(`${flag}: want a positive integer, got ${value}`));
    t.is(r.stderr.trim().split('\n').length, 1, 'one line, no stack');
  }
});

test('zmesh ztunnel refuses a --drain-grace that is not whole seconds, in one line', async (t) => {
  for (const bad of ['1h', '-5', '2.5', '']) {
    const r = await execa(
      ZMESH,
      ['ztunnel', '--node', 'n', '--config', '/dev/null', '--ca-dir', '/nonexistent', '--drain-grace', bad],
      { reject: false },
    );
    t.is(r.exitCode, 2, bad);
    t.is(r.stderr.trim(), `zmesh ztunnel: --drain-grace: want seconds (0..9999999), got ${bad}`.trim());
  }
});
