import test from 'ava';
import { startAdminServer } from './admin-server.js';
import { ControlPlane } from './control-plane.js';
import { podYaml } from './testing/fixtures.js';

test('admin: apply accepts valid YAML, refuses invalid with reasons, serves proxy status and tokens', async (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const admin = await startAdminServer(cp);
  t.teardown(async () => {
    await admin.close();
    await cp.stop();
  });
  const base = `http://127.0.0.1:${admin.port}`;
  const good = await fetch(`${base}/apply`, { method: 'POST', body: podYaml('a', '10.1.0.1') });
  t.is(good.status, 200);
  const bad = await fetch(`${base}/apply?source=bad.yaml`, { method: 'POST', body: podYaml('b', 'nope') });
  t.is(bad.status, 400);
  t.deepEqual(((await bad.json()) as { reasons: string[] }).reasons, [
    'bad.yaml#0 (Pod ns1/b): status.podIP[0]: "nope" is not an IP address',
  ]);
  t.is(cp.store.view().objects.size, 1);
  t.deepEqual(await (await fetch(`${base}/proxy-status`)).json(), []);
  const token = (await (await fetch(`${base}/node-token?node=n1`, { method: 'POST' })).json()) as {
    token: string;
  };
  t.is(cp.tokens.verify(token.token), 'n1');
  await t.throwsAsync(startAdminServer(cp, 0, '0.0.0.0'), { code: 'ZM_ERR_XDS_BIND_REFUSED' });
});
