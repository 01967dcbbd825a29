import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { adminRequest } from '@zmesh/shared';
import test from 'ava';
import { execa, type ResultPromise } from 'execa';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
/** 127.72.0.0/16 is this file's. */
const CP_HOST = '127.72.0.1';
const XDS_PORT = 25_710;

const CONFIG = `apiVersion: v1
kind: Namespace
metadata: { name: team-b, labels: { istio.io/dataplane-mode: ambient } }
---
kind: Pod
metadata: { name: server, namespace: team-b, labels: { app: server } }
spec: { serviceAccountName: server, nodeName: node-a }
status: { podIP: 127.72.2.1 }
---
kind: Service
metadata: { name: server, namespace: team-b }
spec: { clusterIP: 127.72.96.10, selector: { app: server }, ports: [{ port: 80, targetPort: 7000 }] }
---
kind: Gateway
metadata: { name: wp, namespace: team-b }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 127.72.3.1 }] }
`;

async function json(url: string, init?: RequestInit): Promise<unknown> {
  return (await fetch(url, init)).json();
}

test('zmesh control-plane signs and writes roots; zmesh ztunnel --xds gets config and a certificate; ns l7 on/off', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-cp-'));
  await mkdir(join(dir, 'cfg'));
  await writeFile(join(dir, 'cfg', 'mesh.yaml'), CONFIG);
  const started: ResultPromise[] = [];
  t.teardown(async () => {
    for (const p of started) p.kill('SIGTERM');
    await Promise.allSettled(started);
    await rm(dir, { recursive: true, force: true });
  });
  const roots = join(dir, 'roots.pem');
  const admin = join(dir, 'admin.sock');
  started.push(
    execa(
      ZMESH,
      [
        'control-plane',
        '-c',
        join(dir, 'cfg'),
        '--host',
        CP_HOST,
        '--port',
        String(XDS_PORT),
        '--admin-socket',
        admin,
        '--ca-dir',
        join(dir, 'ca'),
        '--roots-file',
        roots,
        '--no-state-dir',
      ],
      { reject: false },
    ),
  );
  await poll(async () => (await adminRequest({ admin }, '/healthz').catch(() => undefined))?.ok === true);
  t.regex(await readFile(roots, 'utf8'), /BEGIN CERTIFICATE/);
  const { token } = (await adminRequest({ admin }, '/node-token?node=node-a', { method: 'POST' })).json<{
    token: string;
  }>();
  await writeFile(join(dir, 'token'), token);
  started.push(
    execa(
      ZMESH,
      [
        'ztunnel',
        '--xds',
        `${CP_HOST}:${XDS_PORT}`,
        '--node',
        'node-a',
        '--address',
        '127.72.0.2',
        '--token-file',
        join(dir, 'token'),
        '--roots-file',
        roots,
        '--snapshot',
        join(dir, 'snapshot'),
      ],
      { reject: false },
    ),
  );
  type Dump = { workloads: Array<{ waypoint?: unknown }>; certificates: Array<{ notAfter?: string }> };
  const dump = () =>
    json('http://127.72.0.2:15000/config_dump').catch(() => undefined) as Promise<Dump | undefined>;
  await poll(async () => ((await dump())?.certificates[0]?.notAfter ?? '') !== '');
  const on = await execa(
    ZMESH,
    ['ns', 'l7', 'on', 'team-b', '--waypoint', 'wp', '--admin', admin, '--timeout', '1'],
    { reject: false },
  );
  // The ztunnel ACKs, but no waypoint runs for team-b/wp: `on` waits for it, then says so.
  t.is(on.exitCode, 1, on.stderr);
  t.regex(on.stdout, /acked by 1 proxies; TIMED OUT after 1s waiting for 1:/);
  t.regex(
    on.stderr,
    /not acked: waypoint team-b\/wp \(NOT_CONNECTED: no waypoint for this Gateway is connected/,
  );
  // Not cut: with no waypoint ACKed, the pod (and its Service) stay direct, and proxy-status says so.
  t.is((await dump())?.workloads[0]?.waypoint, undefined);
  const status = await execa(ZMESH, ['proxy-status', '--admin', admin], { reject: false });
  t.regex(
    status.stderr,
    /^waypoint team-b\/wp: NOT READY: 2 users kept on their previous path until it ACKs/m,
  );
  const off = await execa(ZMESH, ['ns', 'l7', 'off', 'team-b', '--admin', admin], { reject: false });
  t.is(off.exitCode, 0, off.stderr);
  t.is((await dump())?.workloads[0]?.waypoint, undefined);
});

async function poll(cond: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}
