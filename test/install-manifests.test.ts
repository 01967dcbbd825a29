import { readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { controlPlaneCommand } from '@zmesh/control-plane/cli';
import {
  checkCrds,
  DEFAULT_IMAGE,
  DEFAULT_NAMESPACE,
  DEFAULT_VALUES,
  installObjects,
  type ManifestObject,
  parseManifests,
  REQUIRED_CRDS,
  toYaml,
  validateManifest,
} from '@zmesh/harness';
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
  t.is(await readFile(COMMITTED, 'utf8'), toYaml(defaults()));
});

test('every committed manifest validates against its Kubernetes 1.36 / Gateway API schema', async (t) => {
  const docs = parseManifests(await readFile(COMMITTED, 'utf8'));
  t.true(docs.length >= 10);
  for (const doc of docs) t.notThrows(() => validateManifest(doc), `${doc.kind}/${doc.metadata.name}`);
  const kinds = new Set(docs.map((d) => d.kind));
  for (const kind of [
    'Namespace',
    'ClusterRole',
    'Deployment',
    'PodDisruptionBudget',
    'Service',
    'DaemonSet',
    'GatewayClass',
  ])
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
    ['control-plane', 'ztunnel'],
    'one control plane, one ztunnel (the node agent joins when `zmesh node-agent` exists)',
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
  t.deepEqual(pod.volumes.flatMap((v) => (v.hostPath ? [v.hostPath.path] : [])).sort(), [
    '/proc',
    '/sys/fs/bpf',
    '/sys/fs/cgroup',
    '/var/run/ztunnel',
  ]);
});

test('zmesh install: flags and values change the manifests; bad input is one line with its code, exit 2', async (t) => {
  const dir = tmpdir();
  const values = join(dir, `zmesh-values-${process.pid}.yaml`);
  await writeFile(values, 'controlPlaneReplicas: 3\nlogLevel: debug\naccessLog: "sample:0.1"\n');
  const ok = await execa(ZMESH, [
    'install',
    '-n',
    'mesh',
    '--image',
    'registry.local/zmesh:t',
    '--values',
    values,
    '-o',
    'json',
  ]);
  const list = JSON.parse(ok.stdout) as { items: ManifestObject[] };
  for (const o of list.items) validateManifest(o);
  const dep = list.items.find((o) => o.kind === 'Deployment') as unknown as { spec: { replicas: number } };
  t.is(dep.spec.replicas, 3);
  t.true(
    list.items
      .filter((o) => o.kind !== 'Namespace' && !o.kind.startsWith('Cluster') && o.kind !== 'GatewayClass')
      .every((o) => (o.metadata as { namespace?: string }).namespace === 'mesh'),
  );
  t.regex(ok.stdout, /registry\.local\/zmesh:t/);
  t.regex(ok.stdout, /zmesh-control-plane\.mesh\.svc:15010/);

  await writeFile(values, 'controlPlaneReplicas: 0\nlogLevl: debug\n');
  const bad = await execa(ZMESH, ['install', '--values', values], { reject: false });
  t.is(bad.exitCode, 2);
  t.is(bad.stdout, '');
  t.is(bad.stderr.trim().split('\n').length, 1, bad.stderr);
  t.regex(
    bad.stderr,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: invalid install input \/tmp\/zmesh-values-\d+\.yaml: /,
  );
  t.regex(bad.stderr, /controlPlaneReplicas: must be an integer 1\.\.15/);
  t.regex(bad.stderr, /; logLevl: unknown field|: logLevl: unknown field/);
  const badNs = await execa(ZMESH, ['install', '-n', 'Not_A_Name'], { reject: false });
  t.is(badNs.exitCode, 2);
  t.regex(
    badNs.stderr.trim(),
    /^zmesh install: ZM_ERR_INSTALL_INPUT: invalid install input --namespace: "Not_A_Name"/,
  );
});

test('zmesh install --check-crds names the CRDs a cluster dump lacks (exit 1), passes a complete one', async (t) => {
  const crd = (name: string, version: string) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name },
    spec: { versions: [{ name: version, served: true, storage: true }] },
  });
  const file = join(tmpdir(), `zmesh-crds-${process.pid}.json`);
  const partial = REQUIRED_CRDS.filter((c) => !c.name.startsWith('httproutes')).map((c) =>
    crd(c.name, c.name.startsWith('authorization') ? 'v1beta1' : c.version),
  );
  await writeFile(file, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: partial }));
  const missing = await execa(ZMESH, ['install', '--check-crds', file], { reject: false });
  t.is(missing.exitCode, 1);
  t.regex(
    missing.stderr,
    /ZM_ERR_INSTALL_CRDS_MISSING: .*httproutes\.gateway\.networking\.k8s\.io \(Gateway API/,
  );
  t.regex(missing.stderr, /authorizationpolicies\.security\.istio\.io serving v1 \(has v1beta1\)/);

  await writeFile(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: REQUIRED_CRDS.map((c) => crd(c.name, c.version)),
    }),
  );
  const complete = await execa(ZMESH, ['install', '--check-crds', file]);
  t.regex(complete.stdout, /every required CRD is present/);

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
  const head = await execa('git', ['rev-parse', 'HEAD'], { cwd: ROOT, reject: false });
  if (head.exitCode === 0) t.true(info.commit.startsWith(head.stdout.trim()), info.commit);
  else t.is(info.commit, 'unknown');
  t.false(Number.isNaN(Date.parse(info.builtAt)), info.builtAt);
  t.regex(versionLine(info), new RegExp(`^zmesh ${pkg.version} \\(commit ${info.commit}, built `));
});
