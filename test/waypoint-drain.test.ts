import * as http from 'node:http';
import { startL7Lab } from '@zmesh/harness';
import test from 'ava';

/**
 * SIGTERM to a waypoint process under load: it stops taking new work, and every request
 * already in flight is answered before it exits (the real process, fed over xDS).
 */
const SLOW_MS = 800;

function slowApp(host: string, version: string): Promise<{ close(): void }> {
  const server = http.createServer((req, res) => {
    req.resume();
    setTimeout(() => res.end(`${version} ${req.url}\n`), SLOW_MS);
  });
  return new Promise((resolve) =>
    server.listen({ host, port: 8080 }, () =>
      resolve({
        close: () => {
          server.closeAllConnections();
          server.close();
        },
      }),
    ),
  );
}

function get(host: string, port: number, path: string, agent: http.Agent | false) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.get(
      { host, port, path, agent, headers: { host: 'web.shop.svc.cluster.local' } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
  });
}

function exited(pid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  return new Promise((resolve) => {
    const check = () => {
      try {
        process.kill(pid, 0);
      } catch {
        resolve(true);
        return;
      }
      if (Date.now() > deadline) resolve(false);
      else setTimeout(check, 50);
    };
    check();
  });
}

test('a waypoint sent SIGTERM under load answers every request in flight, then exits', async (t) => {
  t.timeout(90_000);
  const lab = await startL7Lab({
    block: '127.52',
    xdsPort: 25_830,
    l7Config: false,
    app: slowApp,
  });
  try {
    await lab.l7(true);
    const { host, port } = lab.entry;
    t.is((await get(host, port, '/warm', false)).status, 200);
    // The waypoint's xDS client reports on its metrics port like ztunnel's.
    const metrics = await (await fetch(`http://${lab.waypointAddress}:15020/metrics`)).text();
    t.regex(metrics, /^zmesh_xds_connected 1$/m);
    t.regex(metrics, /# TYPE zmesh_xds_stream_ends_total counter/);
    const pid = lab.waypointPid();
    if (pid === undefined) throw new Error('no waypoint process');
    // Fresh connections and kept-alive ones, all with a request in flight at the signal.
    const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 5 });
    const inFlight = [
      ...Array.from({ length: 15 }, (_, i) => get(host, port, `/fresh/${i}`, false)),
      ...Array.from({ length: 5 }, (_, i) => get(host, port, `/kept/${i}`, keepAlive)),
    ];
    await new Promise((r) => setTimeout(r, SLOW_MS / 3));
    process.kill(pid, 'SIGTERM');
    const answers = await Promise.all(inFlight);
    keepAlive.destroy();
    t.deepEqual(
      answers.map((a) => a.status),
      Array(20).fill(200),
    );
    t.true(
      answers.every((a) => /^v[12] \/(fresh|kept)\/\d+$/.test(a.body.trim())),
      answers.map((a) => a.body).join(''),
    );
    t.true(await exited(pid, 10_000), 'the waypoint exited once its requests were done');
  } finally {
    await lab.stop();
  }
});
