import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import * as net from 'node:net';
import { createInterface } from 'node:readline';
import test from 'ava';
import { connectHbone } from '../hbone/hbone-client.js';
import { makePki } from '../testing/transport-fixtures.js';
import { FdReserve, nofileLimit } from './fd-reserve.js';

test('FdReserve admits until the reserve, counting admissions between samples', (t) => {
  let fds = 700;
  let now = 0;
  const r = new FdReserve({ reserve: 256, limit: 1024, count: () => fds, now: () => now });
  for (let i = 0; i < 68; i++) t.is(r.check('a'), undefined);
  const e = r.check('a');
  t.is(e?.code, 'ZM_ERR_FD_RESERVE');
  t.regex(e!.message, /768 of 1024 file descriptors open, 256 kept in reserve/);
  fds = 100;
  now = 1000; // a new sample sees the fds freed
  t.is(r.check('a'), undefined);
});

test('the open-file limit is read from /proc', (t) => {
  const limit = nofileLimit();
  t.truthy(limit);
  t.true(limit!.soft > 0 && limit!.soft <= limit!.hard);
});

const prlimit = spawnSync('prlimit', ['--version']).status === 0;

/** Reads one JSON line from the child. */
function nextLine(lines: AsyncIterator<string>): Promise<Record<string, number>> {
  return lines.next().then((r) => JSON.parse(String(r.value)) as Record<string, number>);
}

test('1,200 idlers against a server whose fd limit is 512: refused with ZM_ERR_FD_RESERVE, established tunnels go on, no exit', async (t) => {
  if (!prlimit) {
    t.log('prlimit (util-linux) not installed: cannot lower the child’s RLIMIT_NOFILE; skipped');
    t.pass();
    return;
  }
  const pki = await makePki();
  const env = {
    ...process.env,
    ZMESH_LOG: 'error',
    ZMESH_FD_CHILD: JSON.stringify({
      server: pki.server,
      rootPem: pki.ca.rootPem,
      trustDomain: pki.ca.trustDomain,
      reserve: 256,
    }),
  };
  const script = new URL('../testing/fd-reserve-child.js', import.meta.url).pathname;
  const child: ChildProcessWithoutNullStreams = spawn(
    'prlimit',
    ['--nofile=512:512', '--', process.execPath, script],
    { env },
  );
  let exited: number | null | undefined;
  const idlers: net.Socket[] = [];
  child.once('exit', (code) => {
    exited = code;
  });
  t.teardown(() => {
    if (exited === undefined) child.kill('SIGKILL');
    for (const s of idlers) s.destroy();
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const { port } = await nextLine(lines);
  const connect = () =>
    connectHbone({
      host: '127.0.0.1',
      port: port!,
      credential: pki.client,
      bundle: pki.bundle,
      expectedIdentities: [pki.server.identity],
      timeoutMs: 3000,
    });
  const session = await connect();
  const tunnel = await session.openTunnel({ authority: '127.0.0.1:9' });
  const echo = async (text: string) => {
    const back = new Promise<string>((resolve) => tunnel.once('data', (b: Buffer) => resolve(b.toString())));
    tunnel.write(text);
    return back;
  };
  t.is(await echo('before'), 'before');

  // 1,200 idlers from 12 source addresses; each either stays (TLS never starts) or is refused.
  let refusedSeen = 0;
  await Promise.all(
    Array.from(
      { length: 1200 },
      (_, i) =>
        new Promise<void>((resolve) => {
          const s = net.connect({ host: '127.0.0.1', port: port!, localAddress: `127.0.0.${10 + (i % 12)}` });
          s.on('error', () => {});
          s.resume();
          s.once('close', () => {
            refusedSeen++;
          });
          s.once('connect', () => resolve());
          s.once('error', () => resolve());
          idlers.push(s);
        }),
    ),
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.is(await echo('during'), 'during', 'the established tunnel still flows');
  // The kernel's backlog hands the child its connections over a while on a loaded machine.
  let stats: Record<string, number> = {};
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; ) {
    child.stdin.write('stats\n');
    stats = await nextLine(lines);
    if (stats.refused! >= 600) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  t.log(
    `child: ${stats.fds} fds open, ${stats.refused} refused for the reserve; ${refusedSeen} idlers closed`,
  );
  t.true(stats.fds! <= 512 - 200, `fds ${stats.fds} stay clear of the limit`);
  t.true(stats.refused! >= 600, `${stats.refused} refused`);
  t.is(stats.errors, stats.refused);
  t.is(exited, undefined, 'the child is still running');

  for (const s of idlers) s.destroy();
  await new Promise((resolve) => setTimeout(resolve, 300));
  const again = await connect(); // fds are back: new connections are admitted again
  const t2 = await again.openTunnel({ authority: '127.0.0.1:9' });
  t2.end();
  again.destroy();
  tunnel.end();
  session.destroy();
  child.stdin.end();
  await new Promise((resolve) => (exited === undefined ? child.once('exit', resolve) : resolve(undefined)));
  t.is(exited, 0);
});
