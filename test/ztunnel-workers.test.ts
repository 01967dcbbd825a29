import { mkdtemp, readdir, rm, statfs } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { CertificateAuthority, TrustBundle } from '@zmesh/shared';
import {
  type CertificateSigner,
  type ConfigUpdate,
  LocalCaSigner,
  parseLocalConfig,
  sharedQuotaBuffer,
  TMPFS_MAGIC,
  ZtunnelWorkers,
} from '@zmesh/ztunnel';
import test from 'ava';
import { startEcho } from './helpers/probes.js';

/**
 * `--workers 2` on both nodes of an explicit-proxy pair (loopback only): four client
 * workloads on node-a and two servers on node-b, sharded over each node's two worker threads.
 * Addresses 127.139.x.y: proxies .0.2/.0.3, clients .1.1-4 (team-a), servers .2.1-2 (team-b).
 */
const shmIsTmpfs = await statfs('/dev/shm')
  .then((f) => f.type === TMPFS_MAGIC)
  .catch(() => false);
const keysTest = shmIsTmpfs ? test.serial : test.serial.skip;
if (!shmIsTmpfs)
  test.skip('kept-key tests with workers skipped: /dev/shm is not tmpfs here (--persist-keys refuses anything else)', () => {});
const B = 139;
const ip = (s: string) => `127.${B}.${s}`;
const CLIENTS = [1, 2, 3, 4].map((i) => ({
  name: `c${i}`,
  uid: `Kubernetes//Pod/team-a/c${i}`,
  ip: ip(`1.${i}`),
  port: 18100 + i,
}));
const SERVERS = [1, 2].map((i) => ({ name: `s${i}`, uid: `Kubernetes//Pod/team-b/s${i}`, ip: ip(`2.${i}`) }));
const ECHO_PORT = 7000;

function yaml(marker = 0): string {
  const w = (uid: string, ns: string, addr: string, node: string) =>
    `  - { name: ${uid}, namespace: ${ns}, serviceAccount: ${uid}, addresses: [${addr}], node: ${node} }`;
  return `
workloads:
${CLIENTS.map((c) => w(c.name, 'team-a', c.ip, 'node-a')).join('\n')}
${SERVERS.map((s) => w(s.name, 'team-b', s.ip, 'node-b')).join('\n')}
${w(`marker-${marker}`, 'team-c', ip(`3.${(marker % 250) + 1}`), 'node-c')}
services: []
forwards:
${CLIENTS.map((c, i) => `  - { workload: ${c.uid}, listen: "${c.ip}:${c.port}", destination: "${SERVERS[i % 2]!.ip}:${ECHO_PORT}" }`).join('\n')}
`;
}

function config(marker = 0): ConfigUpdate {
  const parsed = parseLocalConfig(yaml(marker), 'workers-test');
  if (!parsed.ok) throw new Error(parsed.error.join('; '));
  // A marker policy beside the marker workload: a worker showing one without the other saw half a push.
  return {
    ...parsed.value,
    policies: [
      {
        name: `marker-${marker}`,
        namespace: 'team-c',
        scope: 'NAMESPACE',
        action: 'DENY',
        rules: [{ clauses: [] }],
        dryRun: false,
      },
    ],
  };
}

let a: ZtunnelWorkers;
let b: ZtunnelWorkers;
let stopEchoes: () => void;

async function node(
  name: string,
  address: string,
  ca: CertificateAuthority,
  limits = {},
  opts: { persistKeys?: string; signer?: CertificateSigner; maxPreauth?: number } = {},
): Promise<ZtunnelWorkers> {
  const pool = new ZtunnelWorkers({
    count: 2,
    init: {
      node: name,
      address,
      trustDomain: 'cluster.local',
      passthrough: 'deny',
      tenancy: { limits, sharedQuotas: sharedQuotaBuffer() },
      pool: { idleTimeoutMs: 2000 },
      ...(opts.persistKeys ? { persistKeys: opts.persistKeys } : {}),
      ...(opts.maxPreauth ? { inboundLimits: { maxPreauth: opts.maxPreauth } } : {}),
    },
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
    signer: opts.signer ?? new LocalCaSigner(ca),
    ports: { admin: 0, metrics: 0, ready: 0 },
    defaultMetrics: false,
  });
  await pool.start();
  const applied = await pool.applyConfig(config());
  if (!applied.ok) throw new Error(applied.error.join('; '));
  return pool;
}

async function until(cond: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A connection that echoed one byte (kept open), or undefined when it was refused. */
function openEchoing(host: string, port: number, timeoutMs = 3000): Promise<Socket | undefined> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    const timer = setTimeout(() => done(undefined), timeoutMs);
    const done = (v: Socket | undefined) => {
      clearTimeout(timer);
      if (!v) s.destroy();
      resolve(v);
    };
    s.on('error', () => done(undefined));
    s.once('close', () => done(undefined));
    s.once('data', () => done(s));
    s.once('connect', () => s.write('x'));
  });
}

/** One byte through an open connection and back. */
function echoOnce(s: Socket): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), 3000);
    s.once('data', () => {
      clearTimeout(timer);
      resolve(true);
    });
    s.write('y');
  });
}

const echoesOnce = async (host: string, port: number) => {
  const s = await openEchoing(host, port);
  s?.destroy();
  return s !== undefined;
};

let ca: CertificateAuthority;

test.before(async () => {
  ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const echoes = await Promise.all(SERVERS.map((s) => startEcho(s.ip, ECHO_PORT)));
  stopEchoes = () => {
    for (const e of echoes) {
      for (const s of e.sockets) s.destroy();
      e.close();
    }
  };
  b = await node('node-b', ip('0.3'), ca);
  // team-a may hold 4 connections node-wide: its four clients sit on two workers.
  a = await node('node-a', ip('0.2'), ca, { maxConnections: 4 });
  await until(async () => (await a.readiness()).ready && (await b.readiness()).ready, 15_000);
});

test.after.always(async () => {
  stopEchoes?.();
  await a?.stop();
  await b?.stop();
});

test.serial('pods are sharded over both workers and traffic crosses every one of them', async (t) => {
  t.deepEqual(new Set(CLIENTS.map((c) => a.workerOf(c.uid))), new Set([0, 1]));
  t.deepEqual(new Set(SERVERS.map((s) => b.workerOf(s.uid))), new Set([0, 1]));
  for (const c of CLIENTS) t.true(await echoesOnce(c.ip, c.port), `${c.uid} on worker ${a.workerOf(c.uid)}`);
  const dump = (await a.configDump()) as { workers: { index: number; pods: string[] }[]; local: unknown[] };
  t.is(dump.workers.length, 2);
  t.is(dump.local.length, CLIENTS.length);
  // Merged, not duplicated: one series of the counter for both workers' connections.
  const text = await a.mergedMetrics();
  t.regex(text, /zmesh_worker_pods\{worker="1"\} 2/);
  t.is(text.match(/^# TYPE zmesh_worker_pods gauge$/gm)?.length, 1);
});

test.serial('a tenant spread over both workers is held to its node-wide connection quota', async (t) => {
  const held: Socket[] = [];
  for (let round = 0; round < 3; round++)
    for (const c of CLIENTS) {
      const s = await openEchoing(c.ip, c.port, 1500);
      if (s) held.push(s);
    }
  const workers = new Set(held.map((s) => a.workerOf(CLIENTS.find((c) => c.port === s.remotePort)!.uid)));
  t.is(held.length, 4, 'maxConnections 4 for team-a, not 4 per worker');
  t.deepEqual(workers, new Set([0, 1]), 'the admitted connections sit on both workers');
  for (const s of held) s.destroy();
  // Released node-wide too: a new connection is admitted again.
  await until(() => echoesOnce(CLIENTS[0]!.ip, CLIENTS[0]!.port), 5000);
  t.pass();
});

test.serial(
  'a worker killed mid-traffic: the other worker’s connection carries on, its pods come back',
  async (t) => {
    const survivor = CLIENTS.find((c) => a.workerOf(c.uid) === 0)!;
    const victim = CLIENTS.find((c) => a.workerOf(c.uid) === 1)!;
    const long = await openEchoing(survivor.ip, survivor.port);
    t.truthy(long, 'a long-lived connection through worker 0');
    let closed = false;
    long!.once('close', () => {
      closed = true;
    });
    const doomed = await openEchoing(victim.ip, victim.port);
    t.truthy(doomed, 'a connection through worker 1');
    await a.kill(1);
    t.true(await echoOnce(long!), 'worker 0’s connection still echoes after worker 1 died');
    await a.settled();
    await until(() => echoesOnce(victim.ip, victim.port), 10_000);
    t.true(await echoOnce(long!), 'and still after the restart');
    t.false(closed);
    t.is(a.workerOf(victim.uid) !== undefined, true, 'the victim’s pod is homed again');
    t.regex(await a.mergedMetrics(), /zmesh_worker_restarts_total 1/);
    // The dead worker's connection went with it, and so did its count: team-a's node-wide 4
    // are the long one plus three more, not two (a leaked count would hold one forever).
    const more: Socket[] = [];
    for (const c of [...CLIENTS, ...CLIENTS]) {
      const s = await openEchoing(c.ip, c.port, 1500);
      if (s) more.push(s);
    }
    t.is(more.length, 3, 'the dead worker’s share of the quota was given back');
    for (const s of more) s.destroy();
    long!.destroy();
    doomed?.destroy();
  },
);

test.serial('a config push reaches every worker whole: no worker shows two versions at once', async (t) => {
  let pushing = true;
  const seen = new Set<string>();
  /** Each worker's marker workload and marker policy: one of each, from the same push. */
  const check = async () => {
    const markers: string[] = [];
    for (const w of await workerDumps(a)) {
      const marker = w.workloads
        .filter((u) => u.includes('/marker-'))
        .map((u) => u.slice(u.lastIndexOf('/') + 1));
      const policy = w.policies.filter((p) => p.startsWith('marker-'));
      t.is(marker.length, 1);
      t.deepEqual(policy, marker, `worker ${w.index} at version ${w.version}`);
      seen.add(`${w.index}:${marker[0]}`);
      markers.push(marker[0]!);
    }
    return markers;
  };
  const sampler = (async () => {
    while (pushing) await check();
  })();
  for (let v = 1; v <= 40; v++) {
    const r = await a.applyConfig(config(v));
    t.true(r.ok);
    // A push resolves once every worker has applied it.
    if (v % 10 === 0) t.deepEqual(await check(), [`marker-${v}`, `marker-${v}`]);
  }
  pushing = false;
  await sampler;
  t.true(seen.size >= 8, `samples saw several versions on both workers: ${seen.size}`);
  await a.applyConfig(config());
});

keysTest(
  '--persist-keys with workers: each worker keeps its pods’ keys, and a restart with the CA down serves them (skipped where /dev/shm is not tmpfs)',
  async (t) => {
    const dir = await mkdtemp('/dev/shm/zmesh-workers-keys-');
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    await a.stop();
    let signed = 0;
    const counting: CertificateSigner = {
      sign: (csr, identity, ttl) => {
        signed += 1;
        return new LocalCaSigner(ca).sign(csr, identity, ttl);
      },
    };
    a = await node('node-a', ip('0.2'), ca, {}, { persistKeys: dir, signer: counting });
    await until(
      async () => (await a.readiness()).ready && (await readdir(dir)).length === CLIENTS.length,
      15_000,
    );
    t.is(signed, CLIENTS.length, 'one certificate per client identity, from whichever worker serves it');
    await a.stop();

    const down: CertificateSigner = {
      sign: async () => {
        signed += 1;
        throw new Error('CA unreachable');
      },
    };
    const before = signed;
    a = await node('node-a', ip('0.2'), ca, {}, { persistKeys: dir, signer: down });
    await until(async () => (await a.readiness()).ready, 10_000);
    t.is(signed, before, 'the CA was never asked: every worker took its pods’ kept keys');
    for (const c of CLIENTS)
      t.true(await echoesOnce(c.ip, c.port), `${c.uid} on worker ${a.workerOf(c.uid)}`);
  },
);

/** Each worker's own view (the merged dump keeps the first worker's mesh-wide lists). */
async function workerDumps(
  pool: ZtunnelWorkers,
): Promise<{ index: number; version: number; workloads: string[]; policies: string[] }[]> {
  const dumps = await pool.workerDumps();
  return dumps.map((d) => {
    const c = d.configDump as { workloads: { uid: string }[]; policies: { items: { name: string }[] } };
    return {
      index: d.index,
      version: d.version,
      workloads: c.workloads.map((w) => w.uid),
      policies: c.policies.items.map((p) => p.name),
    };
  });
}

test.serial(
  'a drain: a worker that finishes its drain first is not restarted as if it had crashed',
  async (t) => {
    // A connection through one of node-b's workers keeps that worker draining; the other
    // worker's drain ends at once and its thread exits while the first still drains.
    const client = CLIENTS[0]!;
    const held = await openEchoing(client.ip, client.port);
    t.truthy(held);
    const restarts = async () =>
      (await b.metrics.registry.getSingleMetric('zmesh_worker_restarts_total')?.get())?.values[0]?.value ?? 0;
    t.is(await restarts(), 0);
    const drained = b.drain(1500);
    await new Promise((r) => setTimeout(r, 700));
    t.is(await restarts(), 0, 'no restart while the other worker still drains');
    held?.destroy();
    await drained;
    t.is(await restarts(), 0);
  },
);

/** A raw TCP connection to an HBONE port that never starts TLS; resolves once it is open or refused. */
function idler(host: string): Promise<{ socket: Socket; closed: () => boolean }> {
  return new Promise((resolve) => {
    let closed = false;
    const socket = connect({ host, port: 15008 });
    socket.on('error', () => {});
    const done = () => resolve({ socket, closed: () => closed });
    socket.once('close', () => {
      closed = true;
      done();
    });
    socket.once('connect', done);
  });
}

test.serial(
  '--max-preauth is the node’s total: idlers spread over both workers meet one bound',
  async (t) => {
    await b.stop();
    b = await node('node-b', ip('0.3'), ca, {}, { maxPreauth: 2 });
    await until(async () => (await b.readiness()).ready, 10_000);
    t.not(
      b.workerOf(SERVERS[0]!.uid),
      b.workerOf(SERVERS[1]!.uid),
      'the two servers sit on different workers',
    );
    const held = [await idler(SERVERS[0]!.ip), await idler(SERVERS[1]!.ip)];
    const third = await idler(SERVERS[0]!.ip);
    await new Promise((r) => setTimeout(r, 500));
    t.true(third.closed(), 'the third unauthenticated connection is refused: 2 node-wide, not 2 per worker');
    t.false(
      held.some((h) => h.closed()),
      'the two within the bound are held until their handshake deadline',
    );
    for (const h of [...held, third]) h.socket.destroy();
  },
);
