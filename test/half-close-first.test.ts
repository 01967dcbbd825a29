import { connect } from 'node:net';
import { type Mesh, startMesh } from '@zmesh/harness';
import test from 'ava';
import { startEcho } from './helpers/probes.js';

let mesh: Mesh;
let close: () => void;

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: 23,
    forwards: [{ port: 18000, to: '127.23.2.1:7000' }],
  });
  const echo = await startEcho(mesh.ip.server, 7000);
  close = () => {
    for (const s of echo.sockets) s.destroy();
    echo.close();
  };
});

test.after.always(async () => {
  close?.();
  await mesh?.stop();
});

test('a client that half-closes before the tunnel is up still sees the connection close', async (t) => {
  const closed = await Promise.all(
    Array.from(
      { length: 50 },
      () =>
        new Promise<boolean>((resolve) => {
          const s = connect({ host: mesh.ip.client, port: 18000 });
          const timer = setTimeout(() => {
            s.destroy();
            resolve(false);
          }, 5000);
          s.on('connect', () => s.end());
          s.on('error', () => {});
          s.on('close', () => {
            clearTimeout(timer);
            resolve(true);
          });
        }),
    ),
  );
  t.is(closed.filter(Boolean).length, 50);
});
