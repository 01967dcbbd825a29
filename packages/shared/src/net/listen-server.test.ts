import { connect, createServer } from 'node:net';
import test from 'ava';
import { listenServer } from './listen-server.js';
import { whenConnected } from './when-connected.js';

test('a bind that fails rejects; an error once listening is reported and the server keeps accepting', async (t) => {
  const errors: string[] = [];
  const first = createServer((s) => s.end());
  await listenServer(first, { host: '127.0.0.1', port: 0 }, (e) => errors.push(e.message));
  t.teardown(() => first.close());
  const { port } = first.address() as { port: number };

  const second = createServer();
  const inUse = await t.throwsAsync(listenServer(second, { host: '127.0.0.1', port }, () => {}));
  t.is((inUse as NodeJS.ErrnoException).code, 'EADDRINUSE');

  // What net.Server does with a failed accept (lib/net.js onconnection).
  first.emit('error', Object.assign(new Error('accept EPROTO'), { code: 'EPROTO' }));
  t.deepEqual(errors, ['accept EPROTO']);
  t.true(first.listening);
  const socket = await whenConnected(connect({ host: '127.0.0.1', port }));
  t.teardown(() => socket.destroy());
  t.is(socket.remotePort, port);
});
