import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { controlPlaneCommand } from '@zmesh/control-plane/cli';
import {
  checkCrds,
  DEFAULT_IMAGE,
  DEFAULT_NAMESPACE,
  DEFAULT_VALUES,
  IMAGE_ENTRYPOINT,
  installObjects,
  type ManifestObject,
  parseManifests,
  REQUIRED_CRDS,
  runInstall,
  toYaml,
  validateManifest,
} from '@zmesh/harness';
import { nodeAgentCommand } from '@zmesh/node-agent/cli';
import { BUILD_INFO, versionLine } from '@zmesh/shared';
import { waypointCommand } from '@zmesh/waypoint/cli';
import { ztunnelCommand } from '@zmesh/ztunnel/cli';
import test from 'ava';
import { execa } from 'execa';

const ROOT = resolve(import.meta.dirname, '../..');
const ZMESH = join(ROOT, 'bin/zmesh');
const COMMITTED = join(ROOT, 'deploy/kubernetes/zmesh.yaml');

const defaults = () =>
  installObjects({ namespace: DEFAULT_NAMESPACE, image: DEFAULT_IMAGE, values: DEFAULT_VALUES });

test('deploy/kubernetes/zmesh.yaml is what `zmesh install` prints (regenerate: bin/zmesh install > deploy/kubernetes/zmesh.yaml)', async (t) => {
  const committed = await readFile(COMMITTED, 'utf8');
  t.is(committed, toYaml(defaults()));
  // kubectl reads YAML 1.1, where a bare `on` is true: ztunnel's `--access-log on` stays a string.
  t.regex(committed, /- --access-log\n\s+- "on"\n/);
});

test('every committed manifest validates against its Kubernetes 1.36 / Gateway API schema', async (t) => {
  const docs = parseManifests(await readFile(COMMITTED, 'utf8'));
  t.true(docs.length >= 10);
  for (const doc of docs) t.notThrows(() => validateManifest(doc), `${doc.kind}/${doc.metadata.name}`);
  const kinds = new Set(docs.map((d) => d.kind));
  for (const kind of ['Namespace', 'ClusterRole', 'Deployment', 'Service', 'DaemonSet', 'GatewayClass'])
    t.true(kinds.has(kind), kind);
  // The check is real: a wrong type and an unknown kind are refused.
  const deployment = docs.find((d) => d.kind === 'Deployment')!;
  const broken = structuredClone(deployment) as ManifestObject & { spec: { replicas: unknown } };
  broken.spec.replicas = 'two';
  t.throws(() => validateManifest(broken), { message: /replicas must be integer/ });
  t.throws(() => validateManifest({ apiVersion: 'v1', kind: 'Pod' }), {
    message: /not a kind zmesh installs/,
  });
});

const PARSERS: Record<string, () => ReturnType<typeof ztunnelCommand>> = {
  ztunnel: ztunnelCommand,
  'control-plane': controlPlaneCommand,
  waypoint: waypointCommand,
  'node-agent': nodeAgentCommand,
};

/** Parses `args` with the daemon's own commander definition, its action replaced by a no-op. */
async function parseWithDaemon(args: string[]): Promise<Record<string, unknown>> {
  const [sub, ...rest] = args;
  const factory = PARSERS[sub ?? ''];
  if (!factory) throw new Error(`no zmesh daemon ${JSON.stringify(sub)}`);
  let parsed: Record<string, unknown> = {};
  const cmd = factory()
    .exitOverride()
    .configureOutput({ writeErr: () => {}, writeOut: () => {} })
    .action((opts: Record<string, unknown>) => {
      parsed = opts;
    });
  await cmd.parseAsync(rest, { from: 'user' });
  return parsed;
}

interface Container {
  name: string;
  args?: string[];
  command?: string[];
  env?: Array<{ name: string }>;
}

function containers(objects: ManifestObject[]): Array<{ owner: string; container: Container }> {
  return objects.flatMap((o) => {
    const pod = (
      o as { spec?: { template?: { spec?: { containers?: Container[]; initContainers?: Container[] } } } }
    ).spec?.template?.spec;
    if (!pod) return [];
    return [...(pod.initContainers ?? []), ...(pod.containers ?? [])].map((container) => ({
      owner: `${o.kind}/${o.metadata.name}`,
      container,
    }));
  });
}

test("every container's args are accepted by the real flag parser of the daemon it runs", async (t) => {
  const all = containers(defaults());
  t.deepEqual(
    all.map((c) => c.container.args?.[0]).sort(),
    ['control-plane', 'node-agent', 'ztunnel'],
    'one control plane; ztunnel and the node agent on every node',
  );
  // The args start with the subcommand because the image's entrypoint is bin/zmesh.
  t.regex(
    await readFile(join(ROOT, 'Containerfile'), 'utf8'),
    new RegExp(`^ENTRYPOINT \\["${IMAGE_ENTRYPOINT}"\\]$`, 'm'),
  );
  for (const { owner, container } of all) {
    const where = `${owner} ${container.name}`;
    t.is(container.command, undefined, `${where}: runs the image's entrypoint (bin/zmesh)`);
    const args = container.args ?? [];
    const opts = await parseWithDaemon(args);
    t.true(Object.keys(opts).length > 0, where);
    // Every $(VAR) the kubelet expands is defined in the container's env.
    const envNames = new Set((container.env ?? []).map((e) => e.name));
    for (const arg of args)
      for (const m of arg.matchAll(/\$\(([A-Z_][A-Z0-9_]*)\)/g))
        t.true(envNames.has(m[1]!), `${where}: $(${m[1]})`);
  }
  // The check is real: a flag not on main (yet) and a stray argument are refused.
  await t.throwsAsync(parseWithDaemon(['control-plane', '--no-such-flag', '/x']), {
    code: 'commander.unknownOption',
  });
  await t.throwsAsync(parseWithDaemon(['ztunnel', '--node', 'n', 'stray']), {
    code: 'commander.excessArguments',
  });
});

test('the DaemonSet is what a node needs: node-critical, probes on /healthz/*, hostPaths, no privileged mode', (t) => {
  const ds = defaults().find((o) => o.kind === 'DaemonSet') as unknown as {
    spec: {
      updateStrategy: { type: string };
      template: {
        spec: {
          priorityClassName: string;
          containers: Array<{
            name: string;
            livenessProbe: { httpGet: { path: string } };
            readinessProbe: { httpGet: { path: string } };
            securityContext: { privileged: boolean; capabilities: { drop: string[]; add: string[] } };
          }>;
          volumes: Array<{ hostPath?: { path: string } }>;
        };
      };
    };
  };
  const pod = ds.spec.template.spec;
  t.is(pod.priorityClassName, 'system-node-critical');
  t.is(ds.spec.updateStrategy.type, 'RollingUpdate');
  const z = pod.containers[0]!;
  t.is(z.livenessProbe.httpGet.path, '/healthz/live');
  t.is(z.readinessProbe.httpGet.path, '/healthz/ready');
  t.false(z.securityContext.privileged);
  t.deepEqual(z.securityContext.capabilities.drop, ['ALL']);
  t.false(z.securityContext.capabilities.add.includes('SYS_PTRACE'));
  // The node agent: SYS_PTRACE alone (other users' /proc/<pid>/ns/net), its own probes.
  const agent = pod.containers.find((c) => c.name === 'node-agent')!;
  t.is(agent.livenessProbe.httpGet.path, '/healthz/live');
  t.is(agent.readinessProbe.httpGet.path, '/healthz/ready');
  t.false(agent.securityContext.privileged);
  t.deepEqual(agent.securityContext.capabilities, { drop: ['ALL'], add: ['SYS_PTRACE'] });
  t.deepEqual(pod.volumes.flatMap((v) => (v.hostPath ? [v.hostPath.path] : [])).sort(), [
    '/etc/cni/net.d',
    '/opt/cni/bin',
    '/proc',
    '/sys/fs/bpf',
    '/sys/fs/cgroup',
    '/var/run/netns',
    '/var/run/zmesh-cni',
    '/var/run/ztunnel',
  ]);
});

/** `zmesh install` in this process: what it would print on stdout and stderr, and its exit code. */
async function install(opts: Parameters<typeof runInstall>[0]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runInstall(opts, { out: (x) => out.push(x), err: (x) => err.push(x) });
  return { code, stdout: out.join(''), stderr: err };
}

test('zmesh install: flags, values and --ca-dir change the manifests; bad input is one line with its code', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-install-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const values = join(dir, 'values.yaml');
  await writeFile(
    values,
    'controlPlaneReplicas: 3\nstateStore: etcd://etcd-0.etcd:2379,etcd-1.etcd:2379\nlogLevel: debug\naccessLog: "sample:0.1"\n',
  );
  const caDir = join(dir, 'ca');
  const ok = await install({
    namespace: 'mesh',
    image: 'registry.local/zmesh:t',
    values,
    caDir,
    output: 'json',
  });
  t.is(ok.code, 0, ok.stderr.join('\n'));
  const list = JSON.parse(ok.stdout) as { items: ManifestObject[] };
  for (const o of list.items) validateManifest(o);
  const dep = list.items.find((o) => o.kind === 'Deployment') as unknown as { spec: { replicas: number } };
  t.is(dep.spec.replicas, 3);
  // Replicas share the etcd store (no state volume); a budget keeps one of them up.
  t.regex(ok.stdout, /"--store",\s*"etcd:\/\/etcd-0\.etcd:2379,etcd-1\.etcd:2379"/);
  t.notRegex(ok.stdout, /--state-dir/);
  t.true(list.items.some((o) => o.kind === 'PodDisruptionBudget'));
  t.true(
    list.items
      .filter((o) => o.kind !== 'Namespace' && !o.kind.startsWith('Cluster') && o.kind !== 'GatewayClass')
      .every((o) => (o.metadata as { namespace?: string }).namespace === 'mesh'),
  );
  t.regex(ok.stdout, /registry\.local\/zmesh:t/);
  t.regex(ok.stdout, /zmesh-control-plane\.mesh\.svc:15010/);
  t.regex(ok.stdout, /"sample:0\.1"/);
  // --ca-dir: the root CA created there (key 0600), printed as the Secret and, the certificate
  // alone, as the nodes' ConfigMap.
  const rootPem = await readFile(join(caDir, 'root-cert.pem'), 'utf8');
  t.is((await stat(join(caDir, 'root-key.pem'))).mode & 0o777, 0o600);
  const secret = list.items.find((o) => o.kind === 'Secret') as unknown as {
    stringData: Record<string, string>;
  };
  t.deepEqual(Object.keys(secret.stringData).sort(), ['root-cert.pem', 'root-key.pem']);
  t.is(secret.stringData['root-cert.pem'], rootPem);
  const roots = list.items.find((o) => o.metadata.name === 'zmesh-roots') as unknown as {
    data: Record<string, string>;
  };
  t.deepEqual(roots.data, { 'root-cert.pem': rootPem });
  // The defaults print no key.
  t.notRegex(toYaml(defaults()), /PRIVATE KEY/);

  await writeFile(values, 'controlPlaneReplicas: 0\nlogLevl: debug\n');
  // A values file holding bad values is a runtime failure, as a bad file given to apply -f is.
  const bad = await install({ values });
  t.is(bad.code, 1);
  t.is(bad.stdout, '');
  t.is(bad.stderr.length, 1);
  t.regex(bad.stderr[0]!, /^zmesh install: ZM_ERR_INSTALL_INPUT: invalid install input \S+values\.yaml: /);
  t.regex(bad.stderr[0]!, /controlPlaneReplicas: must be an integer 1\.\.15/);
  t.regex(bad.stderr[0]!, /logLevl: unknown field/);
  // More than one replica, each with its own embedded store, would diverge: refused.
  const two = join(dir, 'two-replicas.yaml');
  await writeFile(two, 'controlPlaneReplicas: 2\n');
  const diverging = await install({ values: two });
  t.is(diverging.code, 1);
  t.regex(diverging.stderr[0]!, /controlPlaneReplicas: more than one needs stateStore: etcd:\/\//);
  const badNs = await install({ namespace: 'Not_A_Name' });
  t.deepEqual(badNs.code, 2);
  t.regex(
    badNs.stderr[0]!,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: invalid install input --namespace: "Not_A_Name"/,
  );
  t.is((await install({ output: 'xml' })).code, 2);

  // The command line itself: the same one line on stderr, exit 1, nothing on stdout, no stack.
  const cli = await execa(ZMESH, ['install', '--values', values], { reject: false });
  t.is(cli.exitCode, 1);
  t.is(cli.stdout, '');
  t.is(cli.stderr.trim(), bad.stderr[0] ?? '');
});

test('zmesh install --check-crds names the CRDs a cluster dump lacks (exit 1), passes a complete one', async (t) => {
  const crd = (name: string, version: string) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name },
    spec: { versions: [{ name: version, served: true, storage: true }] },
  });
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-crds-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'crds.json');
  const partial = REQUIRED_CRDS.filter((c) => !c.name.startsWith('httproutes')).map((c) =>
    crd(c.name, c.name.startsWith('authorization') ? 'v1beta1' : c.version),
  );
  await writeFile(file, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: partial }));
  const missing = await install({ checkCrds: file });
  t.is(missing.code, 1);
  t.is(missing.stderr.length, 1);
  t.regex(
    missing.stderr[0]!,
    /ZM_ERR_INSTALL_CRDS_MISSING: .*httproutes\.gateway\.networking\.k8s\.io \(Gateway API/,
  );
  t.regex(missing.stderr[0]!, /authorizationpolicies\.security\.istio\.io serving v1 \(has v1beta1\)/);

  // YAML as `kubectl get crd -o yaml` prints it.
  await writeFile(
    file,
    toYaml(REQUIRED_CRDS.map((c) => crd(c.name, c.version) as unknown as ManifestObject)),
  );
  const complete = await install({ checkCrds: file });
  t.is(complete.code, 0, complete.stderr.join('\n'));
  t.regex(complete.stdout, /every required CRD is present/);

  // A dump that cannot be read: a runtime failure with its code (exit 1), as apply -f's file.
  const absent = await install({ checkCrds: join(dir, 'absent.yaml') });
  t.is(absent.code, 1);
  t.regex(
    absent.stderr[0]!,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: invalid install input \S+absent\.yaml: cannot read: ENOENT$/,
  );
  t.throws(() => checkCrds('kind: Pod\nmetadata: {name: x}\n'), {
    message: 'a Pod document, not a CustomResourceDefinition or List',
  });
  t.throws(() => checkCrds('kind: List\nitems: []\n'), { message: /no CustomResourceDefinition in it/ });
});

test('zmesh version prints the root package version, the git commit and the build time', async (t) => {
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  t.is(pkg.version, '0.1.0');
  const r = await execa(ZMESH, ['version', '--json']);
  const info = JSON.parse(r.stdout) as typeof BUILD_INFO;
  t.deepEqual(info, BUILD_INFO, 'the CLI and the library read the same build');
  t.is(info.version, pkg.version);
  // A commit of this repository (the build may predate HEAD), or `unknown` outside a checkout.
  const sha = /^([0-9a-f]{40})(-dirty)?$/.exec(info.commit)?.[1];
  const inGit = (await execa('git', ['rev-parse', '--git-dir'], { cwd: ROOT, reject: false })).exitCode === 0;
  if (inGit) {
    t.truthy(sha, info.commit);
    const known = await execa('git', ['cat-file', '-e', `${sha}^{commit}`], { cwd: ROOT, reject: false });
    t.is(known.exitCode, 0, `${info.commit} is not a commit of this repository`);
  } else t.is(info.commit, 'unknown');
  t.false(Number.isNaN(Date.parse(info.builtAt)), info.builtAt);
  t.regex(versionLine(info), new RegExp(`^zmesh ${pkg.version} \\(commit ${info.commit}, built `));
});
