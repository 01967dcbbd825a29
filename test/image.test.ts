import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BUILD_INFO, CertificateAuthority } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { execa } from 'execa';

/**
 * `make image` and the image it builds: scripts/image.sh lays out the root from this build
 * and podman builds it from the Containerfile with no registry; then the image runs with no
 * network: `zmesh version` prints this build, `zmesh install` its manifests, and the control
 * plane and a ztunnel start. Root only (podman here runs rootful, and is installed on demand).
 */
const ROOT = resolve(import.meta.dirname, '../..');
const IMAGE_SH = join(ROOT, 'scripts/image.sh');
const IMAGE = `localhost/zmesh-test:${process.pid}`;
const env = { ZMESH_IMAGE: IMAGE };

const unavailable =
  process.getuid?.() !== 0 ? 'not root (podman runs rootful here, installed on demand)' : undefined;
const imageTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`image tests skipped: ${unavailable}`, () => {});

let built: Promise<void> | undefined;
/** One build for the file's tests; the tag is removed when they end. */
function buildOnce(t: ExecutionContext): Promise<void> {
  built ??= execa(IMAGE_SH, ['build'], { env, cwd: ROOT, timeout: 240_000 }).then((r) => {
    t.log(r.stdout.trim());
  });
  return built;
}

test.after.always(async () => {
  if (built) await execa(IMAGE_SH, ['podman', 'rmi', '--force', IMAGE], { reject: false });
});

imageTest('make image builds with no registry; `zmesh version` in it prints this build', async (t) => {
  t.timeout(300_000);
  await buildOnce(t);
  const r = await execa(IMAGE_SH, ['run', '--', 'version', '--json'], { env, timeout: 60_000 });
  t.deepEqual(JSON.parse(r.stdout), BUILD_INFO);
  // No base image: one layer, the root image.sh laid out.
  const layers = await execa(IMAGE_SH, ['podman', 'inspect', '--format', '{{len .RootFS.Layers}}', IMAGE]);
  t.is(layers.stdout.trim(), '1');
  const install = await execa(IMAGE_SH, ['run', '--', 'install', '-o', 'json'], { env, timeout: 60_000 });
  t.true((JSON.parse(install.stdout) as { items: unknown[] }).items.length >= 10);
});

/** Runs the image with `args` until `ready` shows on stderr, then stops it with SIGTERM. */
async function startsAndStops(
  t: ExecutionContext,
  name: string,
  opts: string[],
  args: string[],
  ready: RegExp,
): Promise<void> {
  const proc = execa(IMAGE_SH, ['run', '--name', name, ...opts, '--', ...args], {
    env,
    reject: false,
    timeout: 60_000,
  });
  t.teardown(async () => {
    await execa(IMAGE_SH, ['podman', 'rm', '--force', '--time', '0', name], { reject: false });
  });
  let stderr = '';
  const seen = new Promise<boolean>((resolve) => {
    proc.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (ready.test(stderr)) resolve(true);
    });
    void proc.then(() => resolve(false));
  });
  t.true(await seen, `${args[0]} did not start: ${stderr}`);
  proc.kill('SIGTERM');
  const r = await proc;
  t.false(r.timedOut, `${args[0]} did not stop on SIGTERM`);
  t.is(r.exitCode, 0, `${args[0]}: ${stderr}`);
}

imageTest(
  'the control plane and a ztunnel start from the image (network none) and stop on SIGTERM',
  async (t) => {
    t.timeout(300_000);
    await buildOnce(t);
    await startsAndStops(
      t,
      `zmesh-test-cp-${process.pid}`,
      [],
      ['control-plane'],
      /control plane: xDS and CA on 127\.0\.0\.1:15010/,
    );
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-image-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
    await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
    await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
    await writeFile(join(dir, 'mesh.yaml'), 'workloads: []\n');
    await startsAndStops(
      t,
      `zmesh-test-zt-${process.pid}`,
      ['-v', `${dir}:/cfg:ro`],
      ['ztunnel', '--config', '/cfg/mesh.yaml', '--node', 'n', '--ca-dir', '/cfg'],
      /"msg":"ztunnel started"/,
    );
  },
);
