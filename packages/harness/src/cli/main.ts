import { controlPlaneCommand } from '@zmesh/control-plane/cli';
import { nodeAgentCommand } from '@zmesh/node-agent/cli';
import {
  adminOption,
  BUILD_INFO,
  checked,
  defaultAdminSocket,
  intOption,
  numberOption,
  oneOf,
  runCli,
  versionLine,
  withExamples,
} from '@zmesh/shared/cli';
import { waypointCommand } from '@zmesh/waypoint/cli';
import { ztunnelCommand } from '@zmesh/ztunnel/cli';
import { Argument, Command, Option } from 'commander';

/**
 * `zmesh`: the operator's CLI (cluster, demos, harnesses, bench, apply, delete, proxy-status, ns).
 * The daemons (`ztunnel`, `waypoint`, `control-plane`) belong to their packages, which
 * define their flags and own their entries; bin/zmesh starts those entries directly, and
 * they are listed here so that `zmesh --help` names every command. Each subcommand lives
 * in its own module and is loaded lazily so that `zmesh --help` starts fast.
 */
const program = new Command('zmesh')
  .description('zmesh: an ambient service-mesh data plane (ztunnel, waypoint, control plane)')
  .version(
    versionLine(BUILD_INFO),
    '--version',
    'print the version, git commit and build time (as zmesh version)',
  );

program.addCommand(ztunnelCommand());
program.addCommand(controlPlaneCommand());
program.addCommand(nodeAgentCommand());

const ADMIN_HELP = 'control-plane admin: its Unix socket path, or http://host:port with --admin-token-file';

/** The admin endpoint options every operator command takes. */
function adminOptions(c: Command): Command {
  return c
    .option('--admin <socket|url>', ADMIN_HELP, adminOption, defaultAdminSocket())
    .option('--admin-token-file <file>', 'bearer token for a TCP admin URL');
}

const OUTPUT = ['table', 'wide', 'json', 'yaml'] as const;

adminOptions(
  withExamples(
    program
      .command('apply')
      .description(
        'apply YAML (Pods, Services, Namespaces, policies, waypoints) to a running control plane; refused whole, with every reason, when anything in it would not be served',
      )
      .requiredOption(
        '-f, --file <file|dir|->',
        '(required) YAML file, a directory of .yaml files, or - for stdin',
      ),
    'zmesh apply -f mesh.yaml',
    'zmesh apply -f config/',
    'zmesh install | zmesh apply -f -',
  ),
).action(async (options) => {
  const { runApply } = await import('./operator-commands.js');
  process.exitCode = await runApply(options.file, options);
});

adminOptions(
  withExamples(
    program
      .command('delete')
      .description('delete applied objects: those named in YAML (-f), or one by KIND NAME (-n NS)')
      .argument(
        '[kind]',
        'Pod, Service, Namespace, ServiceAccount, AuthorizationPolicy, Gateway, HTTPRoute, GRPCRoute, DestinationRule',
      )
      .argument('[name]')
      .option('-f, --file <file|dir|->', 'YAML naming the objects: a file, a directory, or - for stdin')
      .option('-n, --namespace <ns>', 'namespace of KIND NAME', 'default'),
    'zmesh delete -f mesh.yaml',
    'zmesh delete pod client -n shop',
  ),
).action(async (kind: string | undefined, name: string | undefined, options) => {
  const { runDelete } = await import('./operator-commands.js');
  process.exitCode = await runDelete(kind, name, options);
});

adminOptions(
  withExamples(
    program
      .command('proxy-status')
      .description(
        'per proxy and type: version sent, acked, nacked (with reason), pending, last contact; per route and parent: Accepted and ResolvedRefs (with reason); waypoints that are not ready',
      )
      .addOption(
        new Option(
          '-o, --output <format>',
          "table, or json/yaml for scripts: {proxies, routes}, the admin API's /proxy-status and /route-status",
        )
          .choices(['table', 'json', 'yaml'])
          .default('table'),
      ),
    'zmesh proxy-status',
    "zmesh proxy-status -o json | jq '.proxies[] | select(.connected)'",
    'zmesh proxy-status -o json | jq \'.routes[] | select(any(.parents[].conditions[]; .status == "False"))\'',
  ),
).action(async (options) => {
  const { runProxyStatus } = await import('./operator-commands.js');
  process.exitCode = await runProxyStatus(options);
});

adminOptions(
  withExamples(
    program
      .command('get')
      .description("list the control plane's applied objects of one kind (or all)")
      .argument('<kind>', 'Pod, Service, Namespace, ServiceAccount, AuthorizationPolicy, Gateway, … or all')
      .argument('[name]', 'only this object')
      .option('-n, --namespace <ns>', 'only this namespace (default: default)')
      .option('-A, --all-namespaces', 'every namespace')
      .addOption(new Option('-o, --output <format>', 'output format').choices(OUTPUT).default('table')),
    'zmesh get pods -n shop',
    'zmesh get all -A',
    'zmesh get pod client -n shop -o yaml',
  ),
).action(async (kind: string, name: string | undefined, options) => {
  const { runGet } = await import('./get-command.js');
  process.exitCode = await runGet(kind, name, options);
});

adminOptions(
  withExamples(
    program
      .command('describe')
      .description(
        'one applied object and its events: NACKed or pending at a proxy, a waypoint not ready, or served',
      )
      .argument('<kind>', 'Pod, Service, Namespace, Gateway, AuthorizationPolicy, …')
      .argument('<name>')
      .option('-n, --namespace <ns>', 'its namespace', 'default'),
    'zmesh describe pod client -n shop',
    'zmesh describe gateway waypoint -n shop',
  ),
).action(async (kind: string, name: string, options) => {
  const { runDescribe } = await import('./describe-command.js');
  process.exitCode = await runDescribe(kind, name, options);
});

adminOptions(
  withExamples(
    program
      .command('ztunnel-config')
      .description(
        "ztunnels' views from their admin /config_dump, as istioctl ztunnel-config: workloads, services, policies, certificates or live connections; every node's ztunnel the control plane knows (narrowed by --node), or one by --ztunnel",
      )
      .addArgument(
        new Argument('<kind>', 'workloads, services, policies, certificates or connections').choices([
          'workloads',
          'services',
          'policies',
          'certificates',
          'connections',
        ]),
      )
      .option(
        '--ztunnel <host[:port]>',
        "one ztunnel's admin address (port 15000 when absent); default: the ztunnels the control plane knows, else 127.0.0.1:15000",
      )
      .option(
        '--node <name>',
        "only this node's ztunnel, found through the control plane (--admin); repeat for several",
        (v: string, all: string[]) => all.concat(v),
        [] as string[],
      )
      .addOption(
        new Option(
          '-o, --output <format>',
          'table, or json/yaml: with --ztunnel that section of /config_dump as it is; through the control plane [{node, admin, items}]',
        )
          .choices(['table', 'json', 'yaml'])
          .default('table'),
      ),
    'zmesh ztunnel-config workloads --ztunnel 127.50.0.2',
    'zmesh ztunnel-config connections --node node-a',
    'zmesh ztunnel-config certificates -o json',
  ),
).action(async (kind, options) => {
  const { runZtunnelConfig } = await import('./ztunnel-config-command.js');
  process.exitCode = await runZtunnelConfig(kind, options);
});

const experimental = program.command('x').description('experimental commands (as istioctl x)');
adminOptions(
  withExamples(
    experimental
      .command('describe')
      .description('explain how the mesh treats an object')
      .command('pod')
      .description(
        "which ztunnel serves a pod (its node's), its identity and certificate expiry, its waypoint, and the L4 policies that apply to it and why",
      )
      .argument('<pod>', 'NAMESPACE/NAME (NAME alone: namespace default)')
      .option(
        '--ztunnel <host[:port]>',
        "read the pod's ztunnel here instead of at the admin address it announced to the control plane",
      )
      .addOption(
        new Option('-o, --output <format>', 'text, or json/yaml for scripts')
          .choices(['text', 'json', 'yaml'])
          .default('text'),
      ),
    'zmesh x describe pod shop/web',
    'zmesh x describe pod shop/web -o json',
  ),
).action(async (pod: string, options) => {
  // The argument and --ztunnel first: the command's module loads the ztunnel's policy store.
  const { podRef, ztunnelAddress } = await import('./ztunnel-config-command.js');
  podRef(pod);
  if (options.ztunnel !== undefined) ztunnelAddress(options.ztunnel);
  const { runDescribePod } = await import('./describe-pod-command.js');
  process.exitCode = await runDescribePod(pod, options);
});

const ns = program.command('ns').description('namespace-wide operations');
adminOptions(
  withExamples(
    ns
      .command('l7')
      .description(
        'turn the namespace waypoint on or off; refused without a waypoint Gateway; waits until the waypoint and every connected proxy have ACKed',
      )
      .addArgument(new Argument('<state>', 'on or off').choices(['on', 'off']))
      .argument('<namespace>')
      .option('--waypoint <name>', 'waypoint (Gateway) name', 'waypoint')
      .option(
        '--timeout <seconds>',
        'how long to wait for ACKs (0..120)',
        numberOption(0, 120, 'seconds'),
        10,
      ),
    'zmesh ns l7 on shop',
    'zmesh ns l7 off shop --timeout 30',
  ),
).action(async (state: string, namespace: string, options) => {
  const { runNamespaceL7 } = await import('./operator-commands.js');
  process.exitCode = await runNamespaceL7(state, namespace, options);
});

adminOptions(
  program
    .command('dashboard')
    .description(
      'serve a live page (loopback only): ztunnels, namespaces with an L7 toggle, workloads, tunnels, denials',
    )
    .option('--listen <host:port>', 'loopback address to serve on', '127.0.0.1:15300')
    .option(
      '--ztunnel <address>',
      "a node's ztunnel address (its 15000/15020/15021 endpoints); repeat per node; default: every ztunnel the control plane knows",
      (v: string, all: string[]) => all.concat(v),
      [] as string[],
    )
    .option(
      '--waypoint <address>',
      "a waypoint's address (its 15020 metrics): the requests it carries, as L7 edges; repeat per waypoint",
      (v: string, all: string[]) => all.concat(v),
      [] as string[],
    ),
).action(async (options) => {
  const { runDashboard } = await import('./dashboard-command.js');
  process.exitCode = await runDashboard(options);
});

program.addCommand(waypointCommand());

program
  .command('version')
  .description('print the version, git commit and build time')
  .option('--json', 'as JSON')
  .action(async (options) => {
    const { BUILD_INFO, versionLine } = await import('@zmesh/shared/cli');
    console.log(options.json ? JSON.stringify(BUILD_INFO) : versionLine(BUILD_INFO));
  });

program
  .command('install')
  .description('print the Kubernetes manifests (kubectl apply -f -); nothing is sent to a cluster')
  .option('-n, --namespace <name>', "the mesh's own namespace", 'zmesh-system')
  .option('--image <ref>', 'the zmesh image (`make image` builds localhost/zmesh:<version>)')
  .option(
    '--values <file>',
    'YAML: controlPlaneReplicas, trustDomain, tokenAudience, imagePullPolicy, logLevel, accessLog',
  )
  .option(
    '--ca-dir <dir>',
    "also print the root CA as the zmesh-ca Secret and zmesh-roots ConfigMap (created in <dir> if absent); the output then holds the CA's private key",
  )
  .option('-o, --output <format>', 'yaml or json', checked(oneOf('yaml', 'json')), 'yaml')
  .option('--dry-run', 'print only (the default: zmesh install never talks to a cluster)')
  .option(
    '--check-crds <file>',
    'instead: say which required CRDs a `kubectl get crd -o yaml` dump lacks (exit 1 naming them)',
  )
  .action(async (options) => {
    const { runInstall } = await import('../install/install-command.js');
    process.exitCode = await runInstall(options);
  });

program
  .command('cluster')
  .description('the local cluster of network namespaces (root): up, down or status')
  .addArgument(new Argument('<action>', 'up, down or status').choices(['up', 'down', 'status']))
  .option('--spec <file>', 'YAML spec: nodes and pods (name, namespace, serviceAccount, node)')
  .option('--nodes <n>', 'without a spec: a grid of n nodes', checked(intOption(1, 64)), '2')
  .option('--pods <m>', 'without a spec: m pods per node', checked(intOption(0, 250)), '2')
  .option('--run-id <id>', 'down/status: one run (default: every recorded cluster)')
  .option('--json', 'status as JSON')
  .action(async (action: string, options) => {
    const { runCluster } = await import('./cluster-command.js');
    process.exitCode = await runCluster(action as 'up' | 'down' | 'status', options);
  });

const harness = program.command('harness').description('prove isolation and resilience on the local cluster');

harness
  .command('waypoint-bench')
  .description('1,000 req/s of 1 KiB HTTP: ztunnel-only path vs through the waypoint, and waypoint CPU')
  .option('--quick', 'short runs')
  .action(async (options) => {
    const { runWaypointBench, waypointTable } = await import('../bench/waypoint-bench.js');
    console.log(waypointTable(await runWaypointBench(options)));
  });

harness
  .command('capture-bench')
  .description('connection setup rate and 1-connection latency: captured path vs direct pod-to-pod')
  .option('--quick', 'fewer connections and round trips')
  .option('--json <file>', 'write the rows as JSON')
  .action(async (options) => {
    const { captureTable, runCaptureBench } = await import('../bench/capture-bench.js');
    console.log(captureTable(await runCaptureBench(options)));
  });

harness
  .command('worker-bench')
  .description(
    'ztunnel --workers 1, 2 and 4: 8 iperf3 streams and redis 50 connections from 4 pods, throughput and ztunnel CPU per GB and per 1,000 requests',
  )
  .option('--quick', 'short runs')
  .option('--workers <n,...>', 'worker counts to measure (default 1,2,4; 1 is the reference)')
  .option('--json <file>', 'write the rows as JSON')
  .option('--png <file>', 'write a chart as PNG')
  .action(async (options) => {
    const { runWorkerBench, workerTable } = await import('../bench/worker-bench.js');
    const workers = options.workers?.split(',').map((w: string) => Number(w.trim()));
    if (workers && !workers.every((w: number) => Number.isInteger(w) && w >= 1 && w <= 16)) {
      console.error(
        `worker-bench: --workers takes whole numbers from 1 to 16, comma-separated (got ${options.workers})`,
      );
      process.exitCode = 2;
      return;
    }
    console.log(workerTable(await runWorkerBench({ ...options, ...(workers ? { workers } : {}) })));
  });

harness
  .command('noisy-neighbor')
  .description('a victim tenant under four attacks by another tenant, fairness on and off')
  .option('--quick', 'short scenarios (CI)')
  .option('--scenarios <names>', 'comma-separated subset of storm,flood,slow,hoard')
  .option('--fairness <which>', 'on, off or both (default both)', checked(oneOf('on', 'off', 'both')))
  .option(
    '--rounds <n>',
    'solo-then-loaded rounds per scenario; the median round is reported (default 3, --quick 1)',
    checked(intOption(1, 99)),
  )
  .option('--workers <n,...>', "ztunnel's --workers (default 1); a list such as 1,2 measures each in one run")
  .option('--json <file>', 'write the scenarios and verdict as JSON')
  .option('--png <file>', 'write a chart as PNG')
  .action(async (options) => {
    const { runNoisyCommand } = await import('./noisy-command.js');
    process.exitCode = await runNoisyCommand(options);
  });

program
  .command('demo')
  .description('run a local two-node mesh with real traffic and print what each side saw')
  .action(async () => {
    const { runDemo } = await import('../demo/demo.js');
    process.exitCode = await runDemo();
  });

program
  .command('bench')
  .description('measure zmesh against direct and C peers in one run; prints ratios, writes JSON and PNG')
  .option('--quick', 'short runs (CI)')
  .option('--json <file>', 'write results as JSON')
  .option('--png <file>', 'write a chart as PNG')
  .option('--markdown <file>', 'rewrite the performance section (between perf markers) of this file')
  .option(
    '--baseline <zmesh-bin>',
    "another build's bin/zmesh, measured as the 'before' ztunnel pair (and waypoint path)",
  )
  .option('--workloads <names>', 'comma-separated substrings: run only the steps whose labels contain one')
  .option(
    '--paths <names>',
    'comma-separated substrings: measure only the paths whose names contain one (=name: exactly that name)',
  )
  .option(
    '--runtimes <list>',
    "only the ztunnel pair, once per Node runtime (comma-separated 'node20', 'node24 --max-semi-space-size=8', or a node's path); prints each ÷ the first",
  )
  .action(async (options) => {
    const { runBench } = await import('../bench/bench.js');
    process.exitCode = await runBench(options);
  });

harness
  .command('bypass')
  .description('try to reach forbidden targets around the mesh; prints each attempt with its evidence')
  .option('--json <file>', 'write the report as JSON')
  .option('--only <text>', 'run only attempts whose id contains this text')
  .action(async (options) => {
    const { runBypass } = await import('./bypass-command.js');
    process.exitCode = await runBypass(options);
  });

harness
  .command('outage')
  .description('control-plane outage drill under steady traffic: prints a timeline, checks and a verdict')
  .option(
    '--duration <seconds>',
    'how long the control plane stays unreachable (default: cert TTL + 5)',
    checked(numberOption(1, 3600, 'seconds')),
  )
  .option(
    '--cert-ttl <seconds>',
    'workload certificate lifetime (time compression)',
    checked(numberOption(2, 86_400, 'seconds')),
    '16',
  )
  .option('--json <file>', 'write {checks, timeline} as JSON')
  .option('--png <file>', 'write the drill chart as PNG')
  .action(async (options) => {
    const { runOutage } = await import('./outage-command.js');
    process.exitCode = await runOutage(options);
  });

harness
  .command('soak')
  .description(
    "a ztunnel pair under good traffic and hostile peers while the control plane restarts; fails if a proxy's RSS, fds, heap or event-loop delay grow, a process dies or a request fails",
  )
  .option('--minutes <n>', 'how long (default 5)')
  .option('--seconds <n>', 'how long, in seconds (short runs, CI)')
  .option(
    '--restart-every-minutes <k>',
    'kill and restart the control plane every K minutes (default 3; once, a quarter in, if the run is shorter than 2K)',
  )
  .option('--restart-signal <s>', 'term, kill, or alternate (SIGKILL first, then SIGTERM, ...)', 'alternate')
  .option('--json <file>', 'write the samples, slopes and verdict as JSON')
  .action(async (options) => {
    const { runSoakCommand } = await import('./soak-command.js');
    process.exitCode = await runSoakCommand(options);
  });

harness
  .command('upgrade')
  .description(
    'ztunnel upgrade drill under traffic: replace ztunnel on each node, count refused and broken connections',
  )
  .option('--long-lived <n>', 'long-lived connections pinging every 100 ms', '20')
  .option(
    '--duration <seconds>',
    'how long the client runs at least (on until 1 s after the last upgrade)',
    '20',
  )
  .option('--json <file>', 'write the report as JSON')
  .action(async (options) => {
    const { runUpgrade } = await import('./upgrade-command.js');
    process.exitCode = await runUpgrade(options);
  });

/** At least one example under every command's --help (the daemons carry their own). */
const EXAMPLES: Record<string, string[]> = {
  version: ['zmesh version', 'zmesh version --json'],
  install: ['zmesh install --ca-dir ./ca | kubectl apply -f -', 'zmesh install --check-crds crds.yaml'],
  cluster: ['zmesh cluster up --nodes 2 --pods 3', 'zmesh cluster status --json', 'zmesh cluster down'],
  ns: ['zmesh ns l7 on shop'],
  x: ['zmesh x describe pod shop/web'],
  'x describe': ['zmesh x describe pod shop/web'],
  harness: ['zmesh harness bypass', 'zmesh harness noisy-neighbor --quick'],
  'harness waypoint-bench': ['zmesh harness waypoint-bench --quick'],
  'harness capture-bench': ['zmesh harness capture-bench --quick --json capture.json'],
  'harness worker-bench': [
    'zmesh harness worker-bench --json workers.json --png workers.png',
    'zmesh harness worker-bench --quick --workers 1,2',
  ],
  'harness noisy-neighbor': [
    'zmesh harness noisy-neighbor --quick',
    'zmesh harness noisy-neighbor --scenarios storm,flood --fairness on',
    'zmesh harness noisy-neighbor --quick --scenarios storm,flood --fairness on --workers 1,2',
  ],
  'harness bypass': ['zmesh harness bypass', 'zmesh harness bypass --only dns --json bypass.json'],
  dashboard: [
    'zmesh dashboard --admin /run/zmesh/admin.sock --ztunnel 127.50.0.2 --ztunnel 127.50.0.3 --waypoint 127.50.3.1',
  ],
  'harness soak': [
    'zmesh harness soak',
    'zmesh harness soak --seconds 60 --json soak.json',
    'zmesh harness soak --minutes 30 --restart-every-minutes 3 --json soak.json',
  ],
  'harness upgrade': ['zmesh harness upgrade', 'zmesh harness upgrade --long-lived 50 --json upgrade.json'],
  'harness outage': [
    'zmesh harness outage',
    'zmesh harness outage --duration 30 --cert-ttl 20 --png outage.png',
  ],
  demo: ['zmesh demo'],
  bench: [
    'zmesh bench --quick',
    'zmesh bench --json bench.json --png bench.png',
    'zmesh bench --runtimes node20,node24 --workloads memory,iperf3,HTTP',
  ],
};
for (const cmd of program.commands) {
  withExamples(cmd, ...(EXAMPLES[cmd.name()] ?? []));
  for (const sub of cmd.commands) withExamples(sub, ...(EXAMPLES[`${cmd.name()} ${sub.name()}`] ?? []));
}
withExamples(
  program,
  'zmesh apply -f mesh.yaml',
  'zmesh get pods -A',
  'zmesh proxy-status',
  'zmesh <command> --help',
);

await runCli(program);
