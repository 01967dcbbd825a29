import { chmod, mkdir, mkdtemp, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adminRequest, CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import { startAdminServer } from './admin-server.js';
import { caReadiness } from './ca-files.js';
import { ControlPlane } from './control-plane.js';
import { MemoryStateStore } from './store/state-store.js';
import { configDir, NAMESPACE_YAML, podYaml, removeDir } from './testing/fixtures.js';

const TOKEN = 'a-long-enough-admin-token-0123456789';

async function socketDir(t: { teardown(f: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-admin-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

test('admin: on a 0600 Unix socket, apply accepts valid YAML, refuses invalid with every reason, deletes, mints tokens', async (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const socket = join(await socketDir(t), 'run', 'cp.sock');
  const admin = await startAdminServer(cp, { socket });
  t.teardown(async () => {
    await admin.close();
    await cp.stop();
  });
  t.is(admin.address, socket);
  t.is((await stat(socket)).mode & 0o777, 0o600, 'only the owner may connect');
  const target = { admin: socket };
  const good = await adminRequest(target, '/apply', {
    method: 'POST',
    body: [NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n'),
  });
  t.is(good.status, 200);
  const bad = await adminRequest(target, '/apply?source=bad.yaml', {
    method: 'POST',
    body: podYaml('b', 'nope'),
  });
  t.is(bad.status, 400);
  t.deepEqual(bad.json(), {
    code: 'ZM_ERR_CONFIG_INVALID',
    reasons: ['bad.yaml#0 (Pod ns1/b): status.podIP[0]: "nope" is not an IP address'],
  });
  t.is(cp.store.view().objects.size, 2);
  t.deepEqual((await adminRequest(target, '/proxy-status')).json(), []);
  const token = (await adminRequest(target, '/node-token?node=n1', { method: 'POST' })).json<{
    token: string;
  }>();
  t.is(cp.tokens.verify(token.token), 'n1');

  const missing = await adminRequest(target, '/delete?kind=pod&namespace=ns1&name=zz', { method: 'POST' });
  t.is(missing.status, 400);
  t.deepEqual(missing.json<{ reasons: string[] }>().reasons, ['Pod/ns1/zz: not found']);
  const deleted = await adminRequest(target, '/delete?kind=pod&namespace=ns1&name=a', { method: 'POST' });
  t.is(deleted.status, 200);
  t.deepEqual([...cp.store.view().objects.keys()], ['Namespace//ns1']);
  const second = new ControlPlane({ trustDomain: 'cluster.local' });
  t.teardown(() => second.stop());
  const taken = await t.throwsAsync(startAdminServer(second, { socket }), { code: 'ZM_ERR_LISTEN_BIND' });
  t.regex(taken?.message ?? '', /EADDRINUSE/, 'a socket that answers is not taken over');
  await admin.close();
  await t.throwsAsync(stat(socket), { code: 'ENOENT' }, 'close removes the socket file');
});

test('admin: a socket directory others may write to is refused', async (t) => {
  const dir = join(await socketDir(t), 'open');
  await mkdir(dir, { mode: 0o777 });
  await chmod(dir, 0o777);
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  t.teardown(() => cp.stop());
  const e = await t.throwsAsync(startAdminServer(cp, { socket: join(dir, 'cp.sock') }), {
    code: 'ZM_ERR_LISTEN_BIND',
  });
  t.regex(e?.message ?? '', /not writable by others/);
});

test('admin: TCP needs a bearer token; loopback only; without the token 401 and counted', async (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  await t.throwsAsync(startAdminServer(cp, { port: 0, token: '' }), { code: 'ZM_ERR_ADMIN_TOKEN_FILE' });
  await t.throwsAsync(startAdminServer(cp, { host: '0.0.0.0', port: 0, token: TOKEN }), {
    code: 'ZM_ERR_XDS_BIND_REFUSED',
  });
  const admin = await startAdminServer(cp, { port: 0, token: TOKEN });
  t.teardown(async () => {
    await admin.close();
    await cp.stop();
  });
  const anonymous = await fetch(`${admin.address}/node-token?node=n1`, { method: 'POST' });
  t.is(anonymous.status, 401);
  t.is(((await anonymous.json()) as { code: string }).code, 'ZM_ERR_ADMIN_UNAUTHORIZED');
  const wrong = await adminRequest({ admin: admin.address, token: `${TOKEN}x` }, '/apply', {
    method: 'POST',
    body: podYaml('a', '10.1.0.1'),
  });
  t.is(wrong.status, 401);
  t.is(cp.store.view().objects.size, 0, 'a refused request changes nothing');
  t.is((await fetch(`${admin.address}/healthz`)).status, 200, 'health needs no token');
  const minted = await adminRequest({ admin: admin.address, token: TOKEN }, '/node-token?node=n1', {
    method: 'POST',
  });
  t.is(minted.status, 200);
  const metrics = await adminRequest({ admin: admin.address, token: TOKEN }, '/metrics');
  t.regex(metrics.text, /^zmesh_cp_admin_unauthorized_total 2$/m);
});

test('admin: /healthz/ready is false until the config is loaded; /metrics counts refusals and changes', async (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const admin = await startAdminServer(cp, { socket: join(await socketDir(t), 'cp.sock') });
  t.teardown(async () => {
    await admin.close();
    await cp.stop();
  });
  const target = { admin: admin.address };
  const before = await adminRequest(target, '/healthz/ready');
  t.is(before.status, 503);
  t.deepEqual(before.json(), { ready: false, reasons: ['config not loaded yet'] });
  await cp.start();
  t.is((await adminRequest(target, '/healthz/ready')).status, 200);
  const a = [NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n');
  t.is((await adminRequest(target, '/apply', { method: 'POST', body: a })).status, 200);
  const b = await adminRequest(target, '/apply', { method: 'POST', body: podYaml('b', '10.1.0.1') });
  t.is(b.status, 400, 'a pod IP used twice');
  const text = (await adminRequest(target, '/metrics')).text;
  t.regex(text, /^zmesh_cp_config_rejections_total\{source="apply"\} 1$/m);
  t.regex(text, /^zmesh_cp_config_changes_total 1$/m);
  t.regex(text, /^zmesh_cp_ready 1$/m);
  t.regex(text, /^zmesh_cp_waypoints_not_ready 0$/m);
});

test('admin: /healthz/ready turns false when the config directory becomes unreadable, and back', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML });
  const cp = new ControlPlane({ trustDomain: 'cluster.local', configDir: dir });
  const admin = await startAdminServer(cp, { socket: join(await socketDir(t), 'cp.sock') });
  t.teardown(async () => {
    await admin.close();
    await cp.stop();
    await removeDir(dir);
  });
  await cp.start();
  const target = { admin: admin.address };
  t.is((await adminRequest(target, '/healthz/ready')).status, 200);
  await rename(dir, `${dir}.moved`);
  await cp.store.reload();
  const down = await adminRequest(target, '/healthz/ready');
  t.is(down.status, 503);
  t.regex(down.json<{ reasons: string[] }>().reasons[0] ?? '', /^config directory unreadable: .*ENOENT/);
  t.true(cp.store.view().objects.has('Namespace//ns1'), 'the last good config is still served');
  await rename(`${dir}.moved`, dir);
  await cp.store.reload();
  t.is((await adminRequest(target, '/healthz/ready')).status, 200);
  cp.addReadinessCheck(() => 'store: connection lost');
  t.deepEqual((await adminRequest(target, '/healthz/ready')).json(), {
    ready: false,
    reasons: ['store: connection lost'],
  });
});

test('admin: /healthz/ready says when the store cannot be written and when the CA root is not valid, and recovers', async (t) => {
  const state = new MemoryStateStore();
  const cp = new ControlPlane({ trustDomain: 'cluster.local', state });
  const admin = await startAdminServer(cp, { socket: join(await socketDir(t), 'cp.sock') });
  t.teardown(async () => {
    await admin.close();
    await cp.stop();
  });
  await cp.start();
  const target = { admin: admin.address };
  const ready = async () =>
    (await adminRequest(target, '/healthz/ready')).json<{ ready: boolean; reasons: string[] }>();
  const commit = state.commit.bind(state);
  state.commit = () => {
    throw new Error('disk I/O error');
  };
  const refused = await adminRequest(target, '/apply', { method: 'POST', body: NAMESPACE_YAML });
  t.is(refused.status, 503);
  t.deepEqual(await ready(), {
    ready: false,
    reasons: ['state store memory cannot be written: disk I/O error'],
  });
  state.commit = commit;
  t.is((await adminRequest(target, '/apply', { method: 'POST', body: NAMESPACE_YAML })).status, 200);
  t.deepEqual(await ready(), { ready: true, reasons: [] });

  // The CA: ready while its root is valid; not once it has expired (every certificate would be refused).
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local', rootTtlSeconds: 60 });
  let now = Date.now();
  cp.addReadinessCheck(caReadiness(ca.rootPem, () => now));
  t.true((await ready()).ready);
  now += 120_000;
  const expired = await ready();
  t.false(expired.ready);
  t.regex(expired.reasons.join(), /^CA root expired at \d{4}-/);
});
