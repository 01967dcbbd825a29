import { execFileSync } from 'node:child_process';
import {
  type LocalMesh,
  PEER_SERVER,
  PRIVILEGE_PROBE,
  parseRateResult,
  RATE_CLIENT,
  startMesh,
  VIP_PREFIX,
} from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import type { ResultPromise } from 'execa';

/*
 * Source-address preservation on the netns cluster (issue 35): the server's getpeername is
 * the client pod's address, over IPv4 and IPv6, directly and through a namespace waypoint;
 * the app's replies to that address never leave its pod; strict inbound still drops a
 * plaintext connection from outside the mesh. Real ztunnels, control plane and waypoint.
 */
const reason = process.getuid?.() !== 0 ? 'not root' : await BpfCapture.unavailableReason();
const meshTest = reason ? test.serial.skip : test.serial;
const why = reason ? ` [skipped: needs root and BPF: ${reason}]` : '';

const VIP = `${VIP_PREFIX}41`;
/** An HTTP server answering with the peer address it saw (getpeername of its socket) and x-forwarded-for. */
const WEB = `require('http').createServer((req, res) => { req.resume(); res.end(req.socket.remoteAddress + ' xff=' + req.headers['x-forwarded-for']); })
  .listen(8080, '::', () => console.log('listening'));`;

let mesh: LocalMesh;
const servers: ResultPromise[] = [];

if (!reason) {
  test.before(async () => {
    mesh = await startMesh({
      run: 'cluster',
      spec: {
        nodes: ['node-a', 'node-b'],
        pods: [
          { name: 'client', namespace: 'front', serviceAccount: 'client', node: 'node-a' },
          { name: 'outsider', namespace: 'outside', serviceAccount: 'outsider', node: 'node-a' },
          { name: 'server', namespace: 'back', serviceAccount: 'server', node: 'node-b' },
          { name: 'web', namespace: 'shop', serviceAccount: 'web', node: 'node-b' },
          { name: 'waypoint', namespace: 'shop', serviceAccount: 'waypoint', node: 'node-b' },
        ],
        services: [
          {
            name: 'web',
            namespace: 'shop',
            vip: VIP,
            ports: [{ port: 80, targetPort: 8080 }],
            pods: ['web'],
          },
        ],
        waypoints: [{ name: 'waypoint', namespace: 'shop', pod: 'waypoint' }],
      },
      controlPlane: true,
      ztunnelLog: 'error',
      enroll: (p) => p.name !== 'outsider',
    });
    for (const [pod, program] of [
      ['server', PEER_SERVER],
      ['web', WEB],
    ] as const) {
      const proc = mesh.cluster.runInPod(mesh.pod(pod), ['node', '-e', program, '8080'], {
        reject: false,
        stdin: 'ignore',
      });
      servers.push(proc);
      await new Promise<void>((resolve) => proc.stdout?.once('data', () => resolve()));
    }
    // Count every TCP segment the server app sends anywhere but lo: its replies must stay in the pod.
    for (const tool of ['iptables', 'ip6tables'])
      nsexec(mesh.pod('server').netnsPath, [
        tool,
        '-I',
        'OUTPUT',
        '!',
        '-o',
        'lo',
        '-p',
        'tcp',
        '--sport',
        '8080',
      ]);
  });

  test.after.always(async () => {
    for (const s of servers) s.kill('SIGKILL');
    await mesh?.down();
  });
}

function nsexec(netnsPath: string, argv: string[]): string {
  return execFileSync('nsenter', [`--net=${netnsPath}`, ...argv], { encoding: 'utf8' });
}

/** Packets the OUTPUT counter rule saw, IPv4 plus IPv6. */
function packetsLeaving(netnsPath: string): number {
  return ['iptables', 'ip6tables']
    .map((tool) => nsexec(netnsPath, [tool, '-L', 'OUTPUT', '-v', '-x', '-n']))
    .flatMap((out) => out.split('\n').filter((l) => l.includes('spt:8080')))
    .reduce((n, l) => n + Number(l.trim().split(/\s+/)[0]), 0);
}

async function connectFrom(pod: string, host: string, port = 8080, timeoutMs = 3000) {
  const r = await mesh.cluster.exec(
    mesh.pod(pod),
    ['node', '-e', RATE_CLIENT, host, String(port), '1', '10', String(timeoutMs)],
    { timeoutMs: timeoutMs + 10_000 },
  );
  return parseRateResult(r.stdout);
}

const metric = (text: string, name: string, labels: string) =>
  text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && l.includes(labels))
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);

meshTest(`the server's getpeername is the client pod's address, IPv4 and IPv6${why}`, async (t) => {
  const client = mesh.pod('client');
  const server = mesh.pod('server');
  const before = await mesh.metrics('node-b');
  const cases = [
    [server.ipv4, `::ffff:${client.ipv4}`],
    [server.ipv6, client.ipv6],
    [`::ffff:${server.ipv4}`, `::ffff:${client.ipv4}`],
  ] as const;
  for (const [host, expected] of cases) {
    const r = await connectFrom('client', host);
    t.deepEqual(Object.keys(r.answers), [expected], `to ${host}: ${JSON.stringify(r)}`);
  }
  const after = await mesh.metrics('node-b');
  const preserved = (text: string) =>
    metric(text, 'zmesh_inbound_source_address_total', 'result="preserved"');
  t.is(preserved(after) - preserved(before), cases.length, 'counted as preserved');
  t.is(metric(after, 'zmesh_inbound_source_address_total', 'result="fallback"'), 0, 'no fallback');
  t.is(packetsLeaving(server.netnsPath), 0, "no reply to the client's address left the server pod");
  const rules = nsexec(server.netnsPath, ['ip', 'rule', 'show']);
  t.regex(rules, /fwmark 0x15008 lookup 15008/, 'reply steering installed in the pod');
});

meshTest(
  `through a namespace waypoint the app sees the original client, not the waypoint, in its socket and in x-forwarded-for${why}`,
  async (t) => {
    const client = mesh.pod('client');
    const waypoint = mesh.pod('waypoint');
    const web = mesh.pod('web');
    for (const url of [`http://${VIP}/`, `http://${web.ipv4}:8080/`]) {
      const r = await mesh.cluster.exec(client, [
        'node',
        '-e',
        `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then(async (r) => console.log(r.status, await r.text()), (e) => console.log('ERR', e.cause?.code ?? e.name))`,
      ]);
      const answer = r.stdout.trim();
      t.is(answer, `200 ::ffff:${client.ipv4} xff=${client.ipv4}`, `${url}: the web app saw ${answer}`);
      t.false(answer.includes(waypoint.ipv4), 'not the waypoint');
    }
  },
);

meshTest(`strict inbound still drops a plaintext connection from outside the mesh${why}`, async (t) => {
  const before = metric(await mesh.metrics('node-b'), 'zmesh_capture_inbound_drops', '');
  const r = await connectFrom('outsider', mesh.pod('server').ipv4, 8080, 1500);
  t.is(r.ok, 0, JSON.stringify(r));
  const after = metric(await mesh.metrics('node-b'), 'zmesh_capture_inbound_drops', '');
  t.true(after > before, `drops ${before} → ${after}`);
});

meshTest(`strict inbound drops plaintext forging a mesh client's address, IPv4 and IPv6${why}`, async (t) => {
  const client = mesh.pod('client');
  const server = mesh.pod('server');
  const outsider = mesh.pod('outsider');
  // IPv6: IP_FREEBIND binds the client's address. IPv4 (the pod's only route is via its
  // gateway, which a foreign source cannot use): the address is added to the outsider's
  // eth0 for the attempt, announcing ARP from its own address so the node's neighbour
  // table keeps the client where it is.
  nsexec(outsider.netnsPath, ['sysctl', '-qw', 'net.ipv4.conf.all.arp_announce=2']);
  nsexec(outsider.netnsPath, ['ip', 'addr', 'add', `${client.ipv4}/32`, 'dev', 'eth0']);
  const forged = (host: string, ip: string) => ({
    check: 'freebind_connect',
    ip,
    host,
    port: 8080,
    timeout: 1.5,
  });
  const before = metric(await mesh.metrics('node-b'), 'zmesh_capture_inbound_drops', '');
  let results: Array<{ ok: boolean; errno: string | null; detail: string }>;
  try {
    const r = await mesh.cluster.exec(outsider, [
      '/usr/bin/python3',
      '-c',
      PRIVILEGE_PROBE,
      JSON.stringify([forged(server.ipv4, client.ipv4), forged(server.ipv6, client.ipv6)]),
    ]);
    results = JSON.parse(r.stdout);
  } finally {
    nsexec(outsider.netnsPath, ['ip', 'addr', 'del', `${client.ipv4}/32`, 'dev', 'eth0']);
  }
  // The forged SYNs left (the kernel let the pod bind and send) and nothing answered: dropped.
  t.deepEqual(
    results.map((x) => [x.ok, x.errno]),
    [
      [false, 'ETIMEDOUT'],
      [false, 'ETIMEDOUT'],
    ],
    JSON.stringify(results),
  );
  const after = metric(await mesh.metrics('node-b'), 'zmesh_capture_inbound_drops', '');
  t.true(after >= before + 2, `drops ${before} → ${after}`);
});

/** node-a's config_dump: the pods it has enrolled and the identities it holds certificates for. */
async function nodeA(): Promise<{
  enrolled: string[];
  certificates: Array<{ identity: string; notAfter?: string }>;
}> {
  const r = await mesh.admin('node-a', 15000, '/config_dump').catch(() => undefined);
  return r?.status === 200 ? JSON.parse(r.body) : { enrolled: [], certificates: [] };
}

meshTest(
  `a restarted ztunnel: a pod's connection made while its first certificate is being issued waits for it${why}`,
  async (t) => {
    t.timeout(60_000);
    const client = mesh.pod('client');
    const identity = 'spiffe://cluster.local/ns/front/sa/client';
    const cp = mesh.controlPlane!;
    // Frozen, the control plane answers no CSR (the CA client's deadline is 10 s): the new
    // process serves config from its snapshot but has no certificate yet.
    cp.pause();
    let resumed = false;
    try {
      await mesh.restartZtunnel('node-a');
      const deadline = Date.now() + 15_000;
      while (!(await nodeA()).enrolled?.includes(client.uid)) {
        if (Date.now() > deadline) throw new Error('the restarted ztunnel never enrolled the client pod');
        await new Promise((r) => setTimeout(r, 100));
      }
      const connecting = connectFrom('client', mesh.pod('server').ipv4, 8080, 8000);
      await new Promise((r) => setTimeout(r, 1000));
      const held = (await nodeA()).certificates.find((c) => c.identity === identity);
      t.is(held?.notAfter, undefined, 'no certificate yet while the connection waits');
      cp.resume();
      resumed = true;
      const r = await connecting;
      t.is(r.ok, 1, `the waiting connection went through once the certificate came: ${JSON.stringify(r)}`);
      const refused = metric(
        await mesh.metrics('node-a'),
        'zmesh_capture_refused_total',
        'reason="pending_certificate"',
      );
      t.is(refused, 0, 'nothing refused for want of a certificate');
    } finally {
      if (!resumed) cp.resume();
    }
    await mesh.waitReady();
  },
);

meshTest(`unenrolling a pod removes its reply steering${why}`, async (t) => {
  const server = mesh.pod('server');
  await mesh.unenroll(server);
  const rules = nsexec(server.netnsPath, ['ip', 'rule', 'show']);
  t.notRegex(rules, /0x15008/);
  t.is(nsexec(server.netnsPath, ['ip', 'route', 'show', 'table', '15008']).trim(), '');
});
