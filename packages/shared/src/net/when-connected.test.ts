import { connect, createServer, Socket } from 'node:net';
import test from 'ava';
import { whenConnected } from './when-connected.js';

test('resolves with the socket once it connects, and rejects a refused connect', async (t) => {
  const server = createServer((s) => s.end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  const socket = await whenConnected(connect({ host: '127.0.0.1', port }));
  t.is(socket.remotePort, port);
  socket.destroy();
  server.close();
  await new Promise((r) => server.once('close', r));
  const refused = await t.throwsAsync(whenConnected(connect({ host: '127.0.0.1', port })));
  t.is((refused as NodeJS.ErrnoException).code, 'ECONNREFUSED');
});

test('a connect that never completes is destroyed after the bound', async (t) => {
  const never = new Socket(); // never told to connect
  const started = Date.now();
  const error = await t.throwsAsync(whenConnected(never, 50));
  t.is(error?.message, 'connect timeout');
  t.true(never.destroyed);
  t.true(Date.now() - started >= 45);
});
