import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import test, { type ExecutionContext } from 'ava';
import { Cluster } from './cluster.js';
import { gridSpec } from './cluster-spec.js';
import { ECHO_SERVER, PROBE_CLIENT, parseProbe } from './test-programs.js';

const isRoot = process.getuid?.() === 0;
/** Serial as root; otherwise skipped, with the reason in the title. */
function rootTest(title: string, fn: (t: ExecutionContext) => Promise<void>): void {
  if (isRoot) test.serial(title, fn);
  else test.serial.skip(`${title} [skipped: needs root for netns, cgroups, veths]`, fn);
}

rootTest(
  '2 nodes x 2 pods: pods reach pods on another node by IPv4 and IPv6; down removes everything',
  async (t) => {
    const cluster = await Cluster.up(gridSpec(2, 2));
    const [a1, , b1] = cluster.pods;
    const server = cluster.runInPod(b1!, ['node', '-e', ECHO_SERVER, '8080'], { reject: false });
    try {
      await new Promise((resolve) => server.stdout?.once('data', resolve));
      const r = await cluster.exec(a1!, [
        'node',
        '-e',
        PROBE_CLIENT,
        JSON.stringify([b1!.ipv4, b1!.ipv6]),
        '8080',
        '3000',
      ]);
      const probes = parseProbe(r.stdout);
      t.deepEqual(
        probes.map((p) => [p.host, p.ok, p.data, p.peer?.address]),
        [
          [b1!.ipv4, true, 'pong', b1!.ipv4],
          [b1!.ipv6, true, 'pong', b1!.ipv6],
        ],
        r.stderr,
      );
      const id = await cluster.exec(a1!, ['sh', '-c', 'id -u; grep CapEff /proc/self/status; echo $$']);
      t.deepEqual(id.stdout.trim().split('\n'), [String(a1!.linuxUid), 'CapEff:\t0000000000000000', '1']);
    } finally {
      server.kill();
      await cluster.down();
    }
    const netns = execFileSync('ip', ['netns', 'list']).toString();
    t.false(netns.includes(`zm-${cluster.runId}`), 'no namespace left');
    t.false(existsSync(cluster.topology.cgroupRoot), 'no cgroup left');
    t.false(execFileSync('ip', ['-o', 'link']).toString().includes(cluster.runId), 'no host interface');
  },
);

rootTest('nothing routes out of the cluster', async (t) => {
  const cluster = await Cluster.up(gridSpec(1, 1));
  try {
    const pod = cluster.pods[0]!;
    const routes = await cluster.exec(pod, ['ip', 'route', 'get', '192.0.2.1']);
    t.not(routes.exitCode, 0, 'no route to a documentation address');
    for (const ns of [pod.netns, cluster.nodes[0]!.netns, cluster.topology.fabricNetns]) {
      const r4 = execFileSync('ip', ['-n', ns, 'route', 'show', 'default']).toString().trim();
      const r6 = execFileSync('ip', ['-n', ns, '-6', 'route', 'show', 'default']).toString().trim();
      t.is(`${r4}${r6}`, '', `${ns} has no default route`);
    }
  } finally {
    await cluster.down();
  }
});

rootTest('stale clusters of dead owners are removed on the next up', async (t) => {
  const index = new URL('../index.js', import.meta.url).href;
  const script = `
    const { Cluster, gridSpec } = await import(${JSON.stringify(index)});
    const c = await Cluster.up(gridSpec(1, 1));
    console.log(c.runId);
    process.kill(process.pid, 'SIGKILL');`;
  let runId = '';
  try {
    execFileSync('node', ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'ignore'] });
  } catch (e) {
    runId = String((e as { stdout?: Buffer }).stdout ?? '').trim();
  }
  t.regex(runId, /^[0-9a-f]{6}$/);
  t.true(existsSync(`/run/netns/zm-${runId}-n1`), 'the killed run left its namespaces');
  const cluster = await Cluster.up(gridSpec(1, 1));
  await cluster.down();
  t.false(existsSync(`/run/netns/zm-${runId}-n1`));
  t.false(existsSync(`${cluster.topology.cgroupRoot.replace(cluster.runId, runId)}`));
});
