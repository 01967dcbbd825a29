import test from 'ava';
import { makePki, sa, startEcho, startHbone } from '../testing/transport-fixtures.js';
import { connectHbone } from './hbone-client.js';

test('a live credential swap reaches new handshakes and leaves open sessions working', async (t) => {
  const pki = await makePki();
  const echo = await startEcho();
  const { server, port } = await startHbone(pki, echo.port);
  const v2 = await pki.ca.issue(sa('server-v2'), 600);
  const connect = () =>
    connectHbone({
      host: '127.0.0.1',
      port,
      credential: pki.client,
      bundle: pki.bundle,
      expectedIdentities: [pki.server.identity, v2.identity],
    });
  const before = await connect();
  t.is(before.peerIdentity, pki.server.identity);
  const openBefore = await before.openTunnel({ authority: '127.0.0.1:9' });

  server.updateCredential(v2);

  const after = await connect();
  t.is(after.peerIdentity, v2.identity, 'a new handshake presents the new certificate');
  // The old session: a tunnel opened before the swap and one opened after both still work.
  const openAfter = await before.openTunnel({ authority: '127.0.0.1:9' });
  for (const [tunnel, text] of [
    [openBefore, 'opened before the swap'],
    [openAfter, 'opened after the swap'],
  ] as const) {
    tunnel.end(text);
    t.is((await tunnel.toArray()).join(''), text);
  }
  t.is(before.peerIdentity, pki.server.identity);
  t.false(before.closed);
  before.close();
  after.close();
  await server.close();
  await echo.close();
});
