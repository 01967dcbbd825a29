import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { installCni } from './cni-install.js';

function setup(t: { teardown: (f: () => void) => void }) {
  const dir = mkdtempSync(join(tmpdir(), 'zm-cni-install-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const binDir = join(dir, 'bin');
  const confDir = join(dir, 'net.d');
  mkdirSync(binDir);
  mkdirSync(confDir);
  writeFileSync(join(dir, 'plugin.js'), '// the plugin\n');
  return {
    binDir,
    confDir,
    install: () =>
      installCni({
        binDir,
        confDir,
        pluginJs: join(dir, 'plugin.js'),
        node: '/usr/bin/node',
        agentSocket: '/run/a.sock',
      }),
  };
}

test('chains zmesh-cni at the end of the first conflist by name, once, and puts it back when rewritten', (t) => {
  const { binDir, confDir, install } = setup(t);
  t.is(install(), undefined, 'no CNI config yet: nothing to chain');
  const primary = { cniVersion: '1.0.0', name: 'k8s', plugins: [{ type: 'calico' }, { type: 'portmap' }] };
  writeFileSync(join(confDir, '10-calico.conflist'), JSON.stringify(primary));
  writeFileSync(join(confDir, '99-other.conflist'), JSON.stringify({ ...primary, name: 'other' }));
  t.is(install(), join(confDir, '10-calico.conflist'));
  install();
  const read = (f: string) => JSON.parse(readFileSync(join(confDir, f), 'utf8')) as typeof primary;
  t.deepEqual(
    read('10-calico.conflist').plugins,
    [{ type: 'calico' }, { type: 'portmap' }, { type: 'zmesh-cni', agent_socket: '/run/a.sock' }],
    'appended once, however often it runs',
  );
  t.deepEqual(read('99-other.conflist'), { ...primary, name: 'other' }, 'only the primary config');
  t.is(statSync(join(binDir, 'zmesh-cni')).mode & 0o777, 0o755);
  t.regex(readFileSync(join(binDir, 'zmesh-cni'), 'utf8'), /exec '\/usr\/bin\/node' '.*zmesh-cni\.js' "\$@"/);
  // The primary CNI rewrites its file: the next pass chains it again.
  writeFileSync(join(confDir, '10-calico.conflist'), JSON.stringify(primary));
  install();
  t.is(read('10-calico.conflist').plugins.at(-1)?.type, 'zmesh-cni');
  t.false(
    readdirSync(confDir).some((f) => f.includes('tmp')),
    'written by rename, no leftovers',
  );
});

test('a single-plugin .conf becomes a .conflist with zmesh-cni after it', (t) => {
  const { confDir, install } = setup(t);
  writeFileSync(
    join(confDir, '10-bridge.conf'),
    JSON.stringify({ cniVersion: '0.4.0', name: 'net', type: 'bridge', bridge: 'cni0' }),
  );
  t.is(install(), join(confDir, '10-bridge.conflist'));
  t.deepEqual(readdirSync(confDir), ['10-bridge.conflist']);
  t.deepEqual(JSON.parse(readFileSync(join(confDir, '10-bridge.conflist'), 'utf8')), {
    cniVersion: '0.4.0',
    name: 'net',
    plugins: [
      { type: 'bridge', bridge: 'cni0' },
      { type: 'zmesh-cni', agent_socket: '/run/a.sock' },
    ],
  });
});
