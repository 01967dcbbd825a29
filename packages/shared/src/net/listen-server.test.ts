import { connect, createServer } from 'node:net';
import test from 'ava';
import { isZmeshError } from '../errors/index.js';
import { listenServer } from './listen-server.js';
import { whenConnected } from './when-connected.js';

test('a bind that fails rejects; an error once listening is reported and the server keeps accepting', async (t) => {
  const errors: string[] = [];
  const first = createServer((s) => s.end());
  await listenServer(
    first,
    { host: '127.0.0.1', port: 0 },
    { name: 'first', onError: (e) => errors.push(e.message) },
  );
  t.teardown(() => first.close());
  const { port } = first.address() as { port: number };

  const second = createServer();
  const inUse = await t.throwsAsync(
    listenServer(second, { host: '127.0.0.1', port }, { name: 'second', onError: () => {} }),
  );
  t.true(isZmeshError(inUse, 'ZM_ERR_LISTEN_BIND'));
  t.is((inUse!.cause as NodeJS.ErrnoException).code, 'EADDRINUSE');
  t.false(second.listening);

  // What net.Server does with a failed accept (lib/net.js onconnection).
  first.emit('error', Object.assign(new Error('accept EPROTO'), { code: 'EPROTO' }));
  t.deepEqual(errors, ['accept EPROTO']);
  t.true(first.listening);
  const socket = await whenConnected(connect({ host: '127.0.0.1', port }));
  t.teardown(() => socket.destroy());
  t.is(socket.remotePort, port);
});

test('the bind error names the listener, address, port and errno', async (t) => {
  const first = createServer();
  await listenServer(first, { host: '127.0.0.1', port: 0 }, { name: 'first', onError: () => {} });
  t.teardown(() => first.close());
  const { port } = first.address() as { port: number };
  const e = await t.throwsAsync(
    listenServer(createServer(), { host: '127.0.0.1', port }, { name: 'metrics', onError: () => {} }),
  );
  t.is(
    e?.message,
    `metrics listener cannot bind 127.0.0.1:${port}: EADDRINUSE (address already in use: another process holds it)`,
  );
  t.like(isZmeshError(e) ? e.context : {}, { listener: 'metrics', errno: 'EADDRINUSE', port });
});

test('an invalid port Node throws for synchronously rejects the same way', async (t) => {
  const e = await t.throwsAsync(
    listenServer(
      createServer(),
      { host: '127.0.0.1', port: Number.NaN },
      { name: 'admin', onError: () => {} },
    ),
  );
  t.true(isZmeshError(e, 'ZM_ERR_LISTEN_BIND'));
  t.like(isZmeshError(e) ? e.context : {}, { listener: 'admin', errno: 'ERR_SOCKET_BAD_PORT' });
});
