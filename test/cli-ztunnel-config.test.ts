import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type ConfigDump, ztunnelConfigTables } from '@zmesh/harness';
import { adminRequest, CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import { execa, type ResultPromise } from 'execa';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');

// 127.88.0.0/16 is this file's.
const MESH = `workloads:
  - { name: client, namespace: demo, serviceAccount: client, addresses: [127.88.1.1], node: n }
  - name: server
    namespace: demo
    serviceAccount: server
    addresses: [127.88.2.1]
    node: other
    waypoint: { hostname: { namespace: demo, hostname: waypoint.demo.svc.cluster.local }, hbonePort: 15008 }
    services: { demo/server.demo.svc.cluster.local: [{ servicePort: 80, targetPort: 8080 }] }
services:
  - { name: server, namespace: demo, addresses: [127.88.96.10], ports: [{ servicePort: 80, targetPort: 8080 }] }
policies:
  - { name: deny-all, namespace: demo, scope: NAMESPACE, action: DENY, rules: [] }
`;

const GOLDEN = {
  workloads: `NAMESPACE   NAME     IP           NODE    WAYPOINT                                PROTOCOL
demo        client   127.88.1.1   n       -                                       HBONE
demo        server   127.88.2.1   other   demo/waypoint.demo.svc.cluster.local   HBONE`,
  services: `NAMESPACE   NAME     VIP            WAYPOINT   ENDPOINTS
demo        server   127.88.96.10   -          1/1`,
  policies: `NAMESPACE   NAME       ACTION   SCOPE
demo        deny-all   DENY     NAMESPACE`,
  certificates: `IDENTITY                                     STATE   NOT-AFTER   ROOTS
spiffe://cluster.local/ns/demo/sa/client   Valid   <time>      1`,
};

test('ztunnel-config workloads|services|policies|certificates: golden tables and json from a real explicit-mode ztunnel', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-ztcfg-'));
  const started: ResultPromise[] = [];
  t.teardown(async () => {
    for (const p of started) p.kill('SIGTERM');
    await Promise.allSettled(started);
    await rm(dir, { recursive: true, force: true });
  });
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
  await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
  await writeFile(join(dir, 'mesh.yaml'), MESH);
  const z = execa(
    ZMESH,
    [
      'ztunnel',
      '--config',
      join(dir, 'mesh.yaml'),
      '--node',
      'n',
      '--address',
      '127.88.0.1',
      '--ca-dir',
      dir,
    ],
    { reject: false },
  );
  started.push(z);
  const admin = { admin: 'http://127.88.0.1:15021' };
  const deadline = Date.now() + 20_000;
  while ((await adminRequest(admin, '/healthz/ready').catch(() => undefined))?.ok !== true) {
    if (Date.now() > deadline || z.exitCode !== null) {
      t.fail(`ztunnel not ready in 20 s (exit ${z.exitCode})`);
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const run = (...argv: string[]) =>
    execa(ZMESH, ['ztunnel-config', ...argv, '--ztunnel', '127.88.0.1'], { reject: false, timeout: 15_000 });
  const kinds = Object.keys(GOLDEN) as Array<keyof typeof GOLDEN>;
  const [tables, json, unreachable] = await Promise.all([
    Promise.all(kinds.map((k) => run(k))),
    run('certificates', '-o', 'json'),
    execa(ZMESH, ['ztunnel-config', 'workloads', '--ztunnel', '127.88.0.2:15000'], { reject: false }),
  ]);
  kinds.forEach((k, i) => {
    const r = tables[i]!;
    t.is(r.exitCode, 0, r.stderr);
    const normal = r.stdout.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, '<time>');
    // The time column's width follows the real time; compare the cells, not the padding.
    const cells = (s: string) => s.split('\n').map((l) => l.split(/\s{2,}/));
    t.deepEqual(cells(normal), cells(GOLDEN[k]), `${k}:\n${r.stdout}`);
  });
  const certs = JSON.parse(json.stdout) as Array<{ identity: string; notAfter: string; roots: number }>;
  t.is(certs[0]?.identity, 'spiffe://cluster.local/ns/demo/sa/client');
  t.true(Date.parse(certs[0]?.notAfter ?? '') > Date.now());
  t.is(unreachable.exitCode, 1);
  t.regex(
    unreachable.stderr,
    /^zmesh ztunnel-config: ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE: ztunnel admin endpoint http:\/\/127\.88\.0\.2:15000 unreachable: .*ECONNREFUSED/,
  );
  t.is(unreachable.stderr.trim().split('\n').length, 1);
});

test('golden: the connections table across two ztunnels (ZTUNNEL column, rows sorted, kubectl ages)', (t) => {
  const now = Date.parse('2026-12-04T12:00:00Z');
  const dump = (items: NonNullable<ConfigDump['connections']>['items']) =>
    ({ connections: { total: items.length, items } }) as ConfigDump;
  t.is(
    ztunnelConfigTables(
      'connections',
      [
        {
          node: 'node-a',
          dump: dump([
            {
              workload: 'shop/web',
              direction: 'outbound',
              local: '10.0.1.5:40222',
              remote: '10.0.2.7:15008',
              peer: 'spiffe://cluster.local/ns/shop/sa/db',
              protocol: 'HBONE',
              since: now - 3_700_000,
            },
            {
              workload: 'shop/web',
              direction: 'inbound',
              local: '10.0.1.5:8080',
              remote: '10.0.3.1:51000',
              peer: 'spiffe://cluster.local/ns/edge/sa/gw',
              protocol: 'HBONE',
              since: now - 4000,
            },
          ]),
        },
        {
          node: 'node-b',
          dump: dump([
            {
              workload: 'shop/db',
              direction: 'outbound',
              local: '10.0.2.7:39000',
              remote: '203.0.113.9:443',
              peer: '',
              protocol: 'TCP',
              since: now - 90_000,
            },
          ]),
        },
      ],
      now,
    ),
    [
      'ZTUNNEL   WORKLOAD   DIRECTION   LOCAL            REMOTE            PEER                                   PROTOCOL   AGE',
      'node-a    shop/web   inbound     10.0.1.5:8080    10.0.3.1:51000    spiffe://cluster.local/ns/edge/sa/gw   HBONE      4s',
      'node-a    shop/web   outbound    10.0.1.5:40222   10.0.2.7:15008    spiffe://cluster.local/ns/shop/sa/db   HBONE      61m',
      'node-b    shop/db    outbound    10.0.2.7:39000   203.0.113.9:443   -                                      TCP        90s',
    ].join('\n'),
  );
});
