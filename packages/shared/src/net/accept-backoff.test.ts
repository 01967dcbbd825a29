import { once } from 'node:events';
import { connect, createServer, type Server } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import test from 'ava';
import { acceptPauses } from './accept-backoff.js';
import { listenServer } from './listen-server.js';
import { whenConnected } from './when-connected.js';

/** What net.Server emits when accept(2) fails for want of fds (lib/net.js onconnection). */
function emfile(server: Server, code = 'EMFILE'): void {
  server.emit('error', Object.assign(new Error(`accept ${code}`), { code, syscall: 'accept' }));
}

async function connects(port: number): Promise<boolean> {
  try {
    (await whenConnected(connect({ host: '127.0.0.1', port }))).destroy();
    return true;
  } catch {
    return false;
  }
}

test('EMFILE on accept stops accepting for a growing pause, counted, then the same port listens again', async (t) => {
  const errors: string[] = [];
  const server = createServer((s) => s.end());
  await listenServer(
    server,
    { host: '127.0.0.1', port: 0 },
    { name: 'emfile-test', onError: (e) => errors.push(e.message), backoff: { minMs: 200, maxMs: 400 } },
  );
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };

  emfile(server);
  emfile(server); // a burst of failed accepts is one pause
  t.false(server.listening);
  t.false(await connects(port), 'refused while paused');
  t.is(await acceptPauses('emfile-test'), 1);
  await once(server, 'listening');
  t.is((server.address() as { port: number }).port, port);
  t.true(await connects(port));

  // The next pause is twice as long, then capped.
  const started = performance.now();
  emfile(server, 'ENFILE');
  await sleep(250);
  t.false(server.listening, 'second pause is 400 ms');
  await once(server, 'listening');
  t.true(performance.now() - started >= 395);
  t.is(await acceptPauses('emfile-test'), 2);
  t.deepEqual(errors, [], 'not reported as an ordinary accept error');
});

test('closing a paused listener cancels the resume and still calls back', async (t) => {
  const server = createServer();
  await listenServer(
    server,
    { host: '127.0.0.1', port: 0 },
    { name: 'emfile-close', onError: () => {}, backoff: { minMs: 50 } },
  );
  emfile(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await sleep(120);
  t.false(server.listening);
});
