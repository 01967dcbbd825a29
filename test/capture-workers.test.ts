import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { type LocalMesh, startMesh } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import type { ResultPromise } from 'execa';

/**
 * `zmesh ztunnel --workers 2` in capture mode on the netns cluster: node-a's two client pods
 * are sharded one per worker thread (their 15001 listeners made in the pods' namespaces from
 * the worker threads), node-b serves the server. A worker killed mid-traffic: the other
 * worker's open connection carries on, the dead worker's pod is re-homed and connects again.
 * Needs root and BPF.
 */
const unavailable = await BpfCapture.unavailableReason();
const meshTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`capture worker tests skipped: ${unavailable}`, () => {});

const ECHO = `require('net').createServer((s) => { s.on('error', () => {}); s.pipe(s); })
  .listen(Number(process.argv[1]), '::', () => console.log('listening'));`;

/** One connection: each stdin line goes out, each echo is printed; its close is printed too. */
const LINE_CLIENT = `const s = require('net').connect(Number(process.argv[2]), process.argv[1]);
s.on('connect', () => console.log('connected'));
s.on('error', (e) => console.log('error ' + e.code));
s.on('close', () => console.log('closed'));
s.on('data', (d) => console.log('echo ' + String(d).trim()));
process.stdin.on('data', (d) => s.write(d));`;

/** Connects, sends one line and exits 0 once it is echoed (1 otherwise, within 2 s). */
const ONE_SHOT = `const s = require('net').connect(Number(process.argv[2]), process.argv[1]);
const t = setTimeout(() => process.exit(1), 2000);
s.on('error', () => process.exit(1));
s.on('connect', () => s.write('ping\\n'));
s.on('data', () => { clearTimeout(t); process.exit(0); });`;

let mesh: LocalMesh;
const procs: ResultPromise[] = [];

function nextLine(proc: ResultPromise, timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no output in time')), timeoutMs);
    proc.stdout?.once('data', (d: Buffer) => {
      clearTimeout(timer);
      resolve(String(d).trim().split('\n')[0]!);
    });
  });
}

/** Open descriptors of the pods' network namespaces in the process tree rooted at `pid` (the ztunnel's). */
function podNetnsFds(pid: number, paths: string[]): number {
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (paths.includes(readlinkSync(`/proc/${pid}/fd/${fd}`))) n++;
    } catch {}
  }
  for (const tid of readdirSync(`/proc/${pid}/task`))
    for (const child of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(/\s+/))
      if (child) n += podNetnsFds(Number(child), paths);
  return n;
}

interface Dump {
  workers: { index: number; pods: string[] }[];
}

if (!unavailable) {
  test.before(async () => {
    mesh = await startMesh({
      run: 'cluster',
      spec: {
        nodes: ['node-a', 'node-b'],
        pods: [
          { name: 'client-0', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
          { name: 'client-1', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
          { name: 'server', namespace: 'team-b', serviceAccount: 'server', node: 'node-b' },
        ],
      },
      ztunnelArgs: ['--workers', '2'],
    });
    const server = mesh.cluster.runInPod(mesh.pod('server'), ['node', '-e', ECHO, '7007'], {
      reject: false,
      stdout: 'pipe',
    });
    procs.push(server);
    await nextLine(server);
  });

  test.after.always(async () => {
    for (const p of procs) p.kill('SIGKILL');
    await mesh?.down();
  });
}

const oneShot = (pod: string) =>
  mesh.cluster
    .exec(mesh.pod(pod), ['node', '-e', ONE_SHOT, mesh.pod('server').ipv4, '7007'], { timeoutMs: 10_000 })
    .then(
      () => true,
      () => false,
    );

meshTest('two captured pods on two workers; one worker killed mid-traffic', async (t) => {
  const dump = (await mesh.configDump('node-a')) as unknown as Dump;
  const workerOf = (pod: string) => dump.workers.find((w) => w.pods.includes(mesh.pod(pod).uid))?.index;
  t.deepEqual(
    new Set([workerOf('client-0'), workerOf('client-1')]),
    new Set([0, 1]),
    JSON.stringify(dump.workers),
  );
  t.true(await oneShot('client-0'));
  t.true(await oneShot('client-1'));

  const open = (pod: string) => {
    const p = mesh.cluster.runInPod(
      mesh.pod(pod),
      ['node', '-e', LINE_CLIENT, mesh.pod('server').ipv4, '7007'],
      {
        reject: false,
        stdout: 'pipe',
        stdin: 'pipe',
      },
    );
    procs.push(p);
    return p;
  };
  const survivor = open('client-0');
  t.is(await nextLine(survivor), 'connected');
  survivor.stdin?.write('one\n');
  t.is(await nextLine(survivor), 'echo one');

  const netnsFds = () =>
    podNetnsFds(mesh.ztunnelPid('node-a')!, [mesh.pod('client-0').netnsPath, mesh.pod('client-1').netnsPath]);
  const fdsBefore = netnsFds();
  t.is(fdsBefore, 4, 'each pod’s namespace held by the main thread and by its worker');
  const victimWorker = workerOf('client-1')!;
  const killed = await mesh.admin(
    'node-a',
    mesh.portsOf('node-a').admin,
    `/debug/workers/kill?index=${victimWorker}`,
    'POST',
  );
  t.is(killed.status, 200, killed.body);

  survivor.stdin?.write('two\n');
  t.is(await nextLine(survivor), 'echo two', 'the other worker’s connection carries on');

  // The dead worker's pod comes back on a worker (capture stayed attached meanwhile).
  const deadline = Date.now() + 20_000;
  let back = false;
  while (!back && Date.now() < deadline) back = await oneShot('client-1');
  t.true(back, 'client-1 connects again after the restart');
  survivor.stdin?.write('three\n');
  t.is(await nextLine(survivor), 'echo three');
  t.regex(await mesh.metrics('node-a'), /^zmesh_worker_restarts_total 1$/m);
  // The restarted worker may still be opening the pod's namespace when the pod first answers.
  const settle = Date.now() + 5_000;
  while (netnsFds() !== fdsBefore && Date.now() < settle) await new Promise((r) => setTimeout(r, 100));
  t.is(
    netnsFds(),
    fdsBefore,
    'the dead worker’s namespace descriptors are not left open, the new one holds its own',
  );
  t.regex(
    await mesh.metrics('node-a'),
    /^zmesh_pods_enrolled 2$/m,
    'enrolled pods counted once, summed over workers',
  );
});
