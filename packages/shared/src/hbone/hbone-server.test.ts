import test from 'ava';
import { makePki, type Pki, sa, startEcho, startHbone } from '../testing/transport-fixtures.js';
import { connectHbone } from './hbone-client.js';

const connect = (pki: Pki, port: number, expected = [pki.server.identity]) =>
  connectHbone({
    host: '127.0.0.1',
    port,
    credential: pki.client,
    bundle: pki.bundle,
    expectedIdentities: expected,
  });

async function until(check: () => boolean, timeoutMs = 3000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return check();
}

test('the TLS server is built at the first connection and dropped once none has been open for the idle period', async (t) => {
  const pki = await makePki();
  const echo = await startEcho();
  const { server, port } = await startHbone(pki, echo.port, { tlsIdleMs: 100 });
  t.false(server.hasTlsServer(), 'a listener nobody has connected to holds no TLS context');

  const first = await connect(pki, port);
  const tunnel = await first.openTunnel({ authority: '127.0.0.1:9' });
  tunnel.end('one');
  t.is((await tunnel.toArray()).join(''), 'one');
  t.true(server.hasTlsServer());
  await new Promise((r) => setTimeout(r, 250));
  t.true(server.hasTlsServer(), 'kept while a session is open, however long');

  first.close();
  t.true(await until(() => !server.hasTlsServer()), 'dropped after the last connection closed');

  const second = await connect(pki, port);
  t.is(second.peerIdentity, pki.server.identity, 'rebuilt for the next connection');
  const again = await second.openTunnel({ authority: '127.0.0.1:9' });
  again.end('two');
  t.is((await again.toArray()).join(''), 'two');
  second.close();
  await server.close();
  await echo.close();
});

test('a credential swapped while no TLS server exists is the one the next handshake presents', async (t) => {
  const pki = await makePki();
  const echo = await startEcho();
  const { server, port } = await startHbone(pki, echo.port, { tlsIdleMs: 50 });
  const v2 = await pki.ca.issue(sa('server-v2'), 600);
  const both = [pki.server.identity, v2.identity];
  (await connect(pki, port, both)).close();
  t.true(await until(() => !server.hasTlsServer()));

  server.updateCredential(v2);
  t.false(server.hasTlsServer(), 'a swap does not build a context nobody uses');
  const session = await connect(pki, port, both);
  t.is(session.peerIdentity, v2.identity);
  session.close();
  await server.close();
  await echo.close();
});

test('one server on two addresses presents the same identity on each and closes both', async (t) => {
  const pki = await makePki();
  const echo = await startEcho();
  const { server, port } = await startHbone(pki, echo.port);
  const other = await server.listen({ host: '127.0.0.1', port: 0 });
  for (const p of [port, other.port]) {
    const session = await connect(pki, p);
    t.is(session.peerIdentity, pki.server.identity, `port ${p}`);
    session.close();
  }
  await server.close();
  for (const p of [port, other.port]) {
    await t.throwsAsync(connect(pki, p), undefined, `port ${p} no longer accepts`);
  }
  await echo.close();
});
