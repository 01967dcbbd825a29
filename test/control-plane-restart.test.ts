import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { sqliteAvailable } from '@zmesh/control-plane';
import { type AdminTarget, adminRequest } from '@zmesh/shared';
import test from 'ava';
import { execa, type ResultPromise } from 'execa';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const KILLS = 20;
/** Each apply is three objects; after any crash all three are there or none is. */
const OBJECTS_PER_APPLY = 3;

function applyYaml(i: number): string {
  const ns = `r-${i}`;
  return [
    `kind: Namespace\nmetadata: { name: ${ns} }\n`,
    `kind: ServiceAccount\nmetadata: { name: sa, namespace: ${ns} }\n`,
    `kind: Pod\nmetadata: { name: p, namespace: ${ns} }\nspec: { serviceAccountName: sa, nodeName: node-a }\n` +
      `status: { podIP: 10.${(i >> 8) & 255}.${i & 255}.7 }\n`,
  ].join('---\n');
}

function keysOf(i: number): string[] {
  return [`Namespace//r-${i}`, `ServiceAccount/r-${i}/sa`, `Pod/r-${i}/p`];
}

interface Running {
  child: ResultPromise;
  admin: AdminTarget;
}

/** Starts `zmesh control-plane --state-dir` and waits for the line naming its admin socket. */
async function start(
  stateDir: string | false,
  rootsFile: string,
  listen = ['--port', '0'],
  extra: string[] = [],
): Promise<Running> {
  const state = stateDir === false ? ['--no-state-dir'] : ['--state-dir', stateDir];
  const adminSocket = join(dirname(rootsFile), 'admin.sock');
  const child = execa(
    ZMESH,
    [
      ...['control-plane', ...state, ...listen, ...extra],
      ...['--admin-socket', adminSocket, '--roots-file', rootsFile],
    ],
    { reject: false, stdin: 'ignore', stdout: 'ignore', env: { ZMESH_LOG: 'error' } },
  );
  const admin = await new Promise<AdminTarget>((ok, fail) => {
    let seen = '';
    const timer = setTimeout(() => fail(new Error(`control plane did not start: ${seen}`)), 15_000);
    child.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes(`admin on unix:${adminSocket}`)) {
        clearTimeout(timer);
        ok({ admin: adminSocket });
      }
    });
    void child.then((r) => fail(new Error(`control plane exited ${r.exitCode}: ${seen}`)));
  });
  return { child, admin };
}

async function objects(admin: AdminTarget): Promise<{ generation: number; objects: string[] }> {
  return (await adminRequest(admin, '/objects')).json<{ generation: number; objects: string[] }>();
}

const unavailable = sqliteAvailable()
  ? undefined
  : `the durable store needs node:sqlite (Node 22.5+), this is ${process.version}`;
if (unavailable) test.skip(`control-plane restart test skipped: ${unavailable}`, () => {});

(unavailable ? test.serial.skip : test.serial)(
  'kill -9 at random instants during applies: nothing acknowledged is lost, nothing is half-applied',
  async (t) => {
    t.timeout(180_000);
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-cp-restart-'));
    const stateDir = join(dir, 'state');
    const rootsFile = join(dir, 'roots.pem');
    let running: Running | undefined;
    t.teardown(async () => {
      running?.child.kill('SIGKILL');
      await running?.child;
      await rm(dir, { recursive: true, force: true });
    });

    const acked = new Set<number>();
    let attempted = 0;
    let lastGeneration = 0;
    let roots: string | undefined;
    const check = async (admin: AdminTarget, when: string) => {
      const state = await objects(admin);
      const present = new Set(state.objects);
      for (let i = 0; i < attempted; i++) {
        const here = keysOf(i).filter((k) => present.has(k)).length;
        if (here !== 0 && here !== OBJECTS_PER_APPLY)
          t.fail(`${when}: apply ${i} is half there (${here} objects)`);
        if (acked.has(i) && here === 0) t.fail(`${when}: acknowledged apply ${i} is lost`);
      }
      t.true(state.generation >= lastGeneration, `${when}: generation went back`);
      lastGeneration = state.generation;
      const rootsNow = await readFile(rootsFile, 'utf8');
      if (roots !== undefined && rootsNow !== roots) t.fail(`${when}: the CA root changed`);
      roots = rootsNow;
      return state.objects.length / OBJECTS_PER_APPLY;
    };

    for (let kill = 0; kill < KILLS; kill++) {
      running = await start(stateDir, rootsFile);
      await check(running.admin, `restart ${kill}`);
      const { child, admin } = running;
      const killAt = Date.now() + 50 + Math.random() * 450;
      const killer = new Promise<void>((done) =>
        setTimeout(() => {
          child.kill('SIGKILL');
          done();
        }, killAt - Date.now()),
      );
      // Applies back to back until the kill; the one in flight then may or may not be kept.
      while (Date.now() < killAt) {
        const i = attempted++;
        const res = await adminRequest(admin, `/apply?source=restart-${i}`, {
          method: 'POST',
          body: applyYaml(i),
        }).catch(() => undefined);
        if (res?.ok) acked.add(i);
        else if (res !== undefined) t.fail(`apply ${i} refused: ${res.status} ${res.text}`);
        else break;
      }
      await killer;
      const exit = await child;
      t.is(exit.signal, 'SIGKILL');
    }
    running = await start(stateDir, rootsFile);
    const kept = await check(running.admin, 'final restart');
    t.log(`${KILLS} kills, ${attempted} applies attempted, ${acked.size} acknowledged, ${kept} kept`);
    t.true(acked.size > KILLS, 'too few applies were acknowledged to mean anything');
    t.true(kept >= acked.size);
    running.child.kill('SIGTERM');
    await running.child;
    running = undefined;
  },
);

/** What the issue applied before its restart lost it: pods, a Gateway, two AuthorizationPolicies (an ALLOW). */
const ISSUE_OBJECTS = `kind: Namespace
metadata: { name: shop, labels: { istio.io/dataplane-mode: ambient } }
---
kind: Pod
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { serviceAccountName: web, nodeName: node-a }
status: { podIP: 10.9.0.1 }
---
kind: Pod
metadata: { name: api, namespace: shop, labels: { app: api } }
spec: { serviceAccountName: api, nodeName: node-b }
status: { podIP: 10.9.0.2 }
---
kind: Gateway
metadata: { name: waypoint, namespace: shop }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 10.9.0.100 }] }
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: allow-web, namespace: shop }
spec:
  action: ALLOW
  selector: { matchLabels: { app: api } }
  rules: [{ from: [{ source: { principals: ["cluster.local/ns/shop/sa/web"] } }] }]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-other, namespace: shop }
spec:
  action: DENY
  selector: { matchLabels: { app: api } }
  rules: [{ from: [{ source: { namespaces: ["other"] } }] }]
`;

(unavailable ? test.serial.skip : test.serial)(
  'the issue restart: kill (SIGTERM) and restart with the same --config and --ca-dir keeps every applied pod, Gateway and policy, and the CA',
  async (t) => {
    t.timeout(60_000);
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-cp-issue-restart-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const config = join(dir, 'cfg');
    await mkdir(config);
    await writeFile(join(config, 'base.yaml'), 'kind: Namespace\nmetadata: { name: from-config }\n');
    const rootsFile = join(dir, 'roots.pem');
    const extra = ['--config', config, '--ca-dir', join(dir, 'ca')];
    const stateDir = join(dir, 'state');
    let cp = await start(stateDir, rootsFile, ['--port', '0'], extra);
    t.teardown(() => {
      cp.child.kill('SIGKILL');
    });
    const file = join(dir, 'shop.yaml');
    await writeFile(file, ISSUE_OBJECTS);
    const applied = await execa(ZMESH, ['apply', '-f', file, '--admin', cp.admin.admin], { reject: false });
    t.is(applied.exitCode, 0, applied.stderr);
    const before = await objects(cp.admin);
    const policies = async (admin: AdminTarget) =>
      (await adminRequest(admin, '/objects?full=1&kind=AuthorizationPolicy')).json<{
        objects: Array<{ metadata: { name: string }; raw: { spec: { action: string } } }>;
      }>().objects;
    const policiesBefore = await policies(cp.admin);
    const rootsBefore = await readFile(rootsFile, 'utf8');

    cp.child.kill('SIGTERM');
    t.is((await cp.child).exitCode, 0, 'a clean stop');
    cp = await start(stateDir, rootsFile, ['--port', '0'], extra);
    const after = await objects(cp.admin);
    t.deepEqual(after.objects, before.objects);
    t.true(after.generation >= before.generation);
    for (const key of [
      'Pod/shop/web',
      'Pod/shop/api',
      'Gateway/shop/waypoint',
      'AuthorizationPolicy/shop/allow-web',
    ])
      t.true(after.objects.includes(key), key);
    t.deepEqual(await policies(cp.admin), policiesBefore, 'both policies, the ALLOW among them, as applied');
    t.true(
      policiesBefore.some((p) => p.raw.spec.action === 'ALLOW'),
      'an ALLOW among them',
    );
    t.is(await readFile(rootsFile, 'utf8'), rootsBefore, 'the same CA root');
    cp.child.kill('SIGTERM');
    await cp.child;
  },
);

/** 127.77.0.0/16 and xDS port 25_770 are this file's. */
const CP_HOST = '127.77.0.1';
const XDS = `${CP_HOST}:25770`;
const ZTUNNEL_METRICS = 'http://127.77.0.2:15020/metrics';
const POD = `kind: Namespace
metadata: { name: team-r }
---
kind: Pod
metadata: { name: server, namespace: team-r }
spec: { serviceAccountName: server, nodeName: node-r }
status: { podIP: 127.77.2.1 }
`;

async function poll(what: string, cond: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface StatusRow {
  proxy: string;
  connected: boolean;
  refused: { reason: string } | null;
  types: Record<string, { state: string; acked: number | null; current: number }>;
}

async function statusRows(admin: AdminTarget): Promise<StatusRow[]> {
  return (await adminRequest(admin, '/proxy-status')).json<StatusRow[]>();
}

async function mint(admin: AdminTarget, file: string): Promise<void> {
  const res = await adminRequest(admin, '/node-token?node=node-r', { method: 'POST' });
  await writeFile(file, res.json<{ token: string }>().token);
}

(unavailable ? test.serial.skip : test.serial)(
  'a ztunnel rides through restarts: its token stays valid from the state dir; without one, a re-minted token file is read',
  async (t) => {
    t.timeout(90_000);
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-cp-token-'));
    const stateDir = join(dir, 'state');
    const rootsFile = join(dir, 'roots.pem');
    const tokenFile = join(dir, 'token');
    const listen = ['--host', CP_HOST, '--port', '25770'];
    const children: ResultPromise[] = [];
    t.teardown(async () => {
      for (const c of children) c.kill('SIGKILL');
      await Promise.allSettled(children);
      await rm(dir, { recursive: true, force: true });
    });
    let cp = await start(stateDir, rootsFile, listen);
    children.push(cp.child);
    const applied = await adminRequest(cp.admin, '/apply', { method: 'POST', body: POD });
    t.true(applied.ok, applied.text);
    await mint(cp.admin, tokenFile);
    const ztunnel = execa(
      ZMESH,
      [
        'ztunnel',
        ...['--xds', XDS, '--node', 'node-r', '--address', '127.77.0.2'],
        ...['--token-file', tokenFile, '--roots-file', rootsFile, '--xds-backoff', '100:500'],
      ],
      { reject: false, stdin: 'ignore', stdout: 'ignore', env: { ZMESH_LOG: 'error' } },
    );
    children.push(ztunnel);
    const connected = async (admin: AdminTarget) =>
      (await statusRows(admin)).some((r) => r.connected && r.refused === null);
    await poll('the ztunnel to connect', () => connected(cp.admin));

    // kill -9 and restart from the state dir: same key, so the same token is accepted.
    cp.child.kill('SIGKILL');
    await cp.child;
    cp = await start(stateDir, rootsFile, listen);
    children.push(cp.child);
    await poll('the ztunnel to reconnect after a restart from the state dir', () => connected(cp.admin));
    // Served, not only stored: the restored pod is compiled and the ztunnel ACKs it.
    await poll('the restored config to be served and ACKed', async () =>
      (await statusRows(cp.admin)).some((r) =>
        Object.entries(r.types).some(
          ([type, s]) =>
            type.endsWith('.Address') && s.state === 'SYNCED' && s.acked !== null && s.current > 0,
        ),
      ),
    );
    const kept = await objects(cp.admin);
    t.deepEqual(kept.objects, ['Namespace//team-r', 'Pod/team-r/server']);

    // Without a state dir a restart has a new key: the ztunnel is refused, and proxy-status says so.
    cp.child.kill('SIGKILL');
    await cp.child;
    cp = await start(false, rootsFile, listen);
    children.push(cp.child);
    await poll('proxy-status to list the refused ztunnel', async () =>
      (await statusRows(cp.admin)).some((r) => r.refused?.reason === 'missing or invalid node token'),
    );
    // Re-minting into the same token file is enough: the ztunnel re-reads it when refused.
    await mint(cp.admin, tokenFile);
    await poll('the ztunnel to reconnect with the re-minted token', () => connected(cp.admin));
    const ends = await (await fetch(ZTUNNEL_METRICS)).text();
    t.regex(ends, /zmesh_xds_stream_ends_total\{code="UNAUTHENTICATED"\} [1-9]/);
  },
);
