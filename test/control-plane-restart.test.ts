import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { sqliteAvailable } from '@zmesh/control-plane';
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
  admin: string;
}

/** Starts `zmesh control-plane --state-dir` and waits for the line naming its admin port. */
async function start(stateDir: string, rootsFile: string): Promise<Running> {
  const child = execa(
    ZMESH,
    ['control-plane', '--state-dir', stateDir, '--port', '0', '--admin-port', '0', '--roots-file', rootsFile],
    { reject: false, stdin: 'ignore', stdout: 'ignore', env: { ZMESH_LOG: 'error' } },
  );
  const admin = await new Promise<string>((ok, fail) => {
    let seen = '';
    const timer = setTimeout(() => fail(new Error(`control plane did not start: ${seen}`)), 15_000);
    child.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
      const m = /admin on (127\.0\.0\.1:\d+)/.exec(seen);
      if (m) {
        clearTimeout(timer);
        ok(`http://${m[1]}`);
      }
    });
    void child.then((r) => fail(new Error(`control plane exited ${r.exitCode}: ${seen}`)));
  });
  return { child, admin };
}

async function objects(admin: string): Promise<{ generation: number; objects: string[] }> {
  return (await (await fetch(`${admin}/objects`)).json()) as { generation: number; objects: string[] };
}

const unavailable = sqliteAvailable()
  ? undefined
  : `the durable store needs node:sqlite (Node 22.5+), this is ${process.version}`;
if (unavailable) test.skip(`control-plane restart test skipped: ${unavailable}`, () => {});

(unavailable ? test.skip : test)(
  'kill -9 at random instants during applies: nothing acknowledged is lost, nothing is half-applied',
  async (t) => {
    t.timeout(60_000);
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
    const check = async (admin: string, when: string) => {
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
        const res = await fetch(`${admin}/apply?source=restart-${i}`, {
          method: 'POST',
          body: applyYaml(i),
        }).catch(() => undefined);
        if (res?.ok) acked.add(i);
        else if (res !== undefined) t.fail(`apply ${i} refused: ${res.status} ${await res.text()}`);
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
