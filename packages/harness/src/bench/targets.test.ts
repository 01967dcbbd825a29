import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import test from 'ava';
import { startTargets } from './targets.js';

/** A loopback address of its own, so the quick bench test's servers never collide with it. */
const HOST = '127.40.99.1';

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = connect({ host: HOST, port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });

test('a second bench whose ports are taken fails with a clear error and leaves nothing listening', async (t) => {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(7007, HOST, r));
  try {
    const e = await t.throwsAsync(startTargets(HOST, '0', tmpdir()));
    t.regex(e!.message, /address in use\): is another zmesh bench running\?/);
    t.false(await listening(8080), 'the HTTP server it had opened is closed again');
    t.false(await listening(5201), 'no iperf3 server was started');
  } finally {
    await new Promise((r) => holder.close(r));
  }
});
