import { Command } from 'commander';

/**
 * `zmesh`: one CLI for the daemons (`ztunnel`, `waypoint`, `control-plane`) and the
 * operator's commands. Each subcommand lives in its own module and is loaded lazily so
 * that `zmesh --help` starts fast and a daemon loads only what it runs.
 */
const program = new Command('zmesh')
  .description('zmesh: an ambient service-mesh data plane (ztunnel, waypoint, control plane)')
  .showHelpAfterError();

program
  .command('ztunnel')
  .description('run the node proxy')
  .option('-c, --config <file>', 'local YAML config (workloads, services, policies)')
  .option('--node <name>', 'this node name')
  .option('--address <ip>', 'loopback address of this ztunnel in explicit-proxy mode (127.0.0.N)')
  .option(
    '--ca-dir <dir>',
    'explicit-proxy mode without a control plane: directory with root-cert.pem and root-key.pem',
  )
  .option('--trust-domain <domain>', 'SPIFFE trust domain', 'cluster.local')
  .option('--passthrough <allow|deny>', 'destinations outside the mesh: plain TCP or refused', 'deny')
  .option(
    '--fairness <on|off>',
    'tenant isolation: quotas, fair setup queue, fair byte copying, shared HTTP/2 stream windows, bounded send buffers (off: plain FIFO)',
    'on',
  )
  .option('--tenant-connect-rate <n>', 'per-tenant quota: sustained new connections per second (default 500)')
  .option('--tenant-connect-burst <n>', 'per-tenant quota: connections opened in a burst (default 1000)')
  .option('--tenant-max-connections <n>', 'per-tenant quota: open connections at once (default 4096)')
  .option('--capture-scope <name>', 'capture mode: BPF pin scope (default: the node name)')
  .option(
    '--agent-socket <path>',
    'capture mode: the node-agent Unix socket pods are enrolled through (needs root and BPF)',
  )
  .option('--xds <host:port>', 'control plane (xDS and CA); --config then only supplies forwards')
  .option('--token-file <file>', 'node bootstrap token for xDS and the CA (with --xds)')
  .option('--roots-file <file>', 'trusted roots, watched (with --xds)')
  .option('--snapshot <file>', 'last-known-good xDS snapshot (with --xds)')
  .option(
    '--trust-ca-roots',
    'trust a new root found at the end of a CA-returned chain (authenticated CA channel only)',
  )
  .option(
    '--persist-keys <dir>',
    'keep workload keys and certificates in this root-only tmpfs directory, so a restart during a control-plane outage serves at once (see README)',
  )
  .option('--max-snapshot-age <seconds>', 'refuse an on-disk snapshot older than this at start', '604800')
  .option(
    '--authz-max-staleness <seconds>',
    'authorization last-known-good limit during an outage (default: the workload certificate lifetime)',
  )
  .option(
    '--xds-backoff <initialMs:maxMs>',
    'xDS reconnect and certificate retry backoff bounds',
    '500:30000',
  )
  .option('--admin-port <port>', 'admin port (/config_dump, /logging, /quitquitquit)', '15000')
  .option('--metrics-port <port>', 'Prometheus /metrics port', '15020')
  .option('--ready-port <port>', 'readiness and liveness port', '15021')
  .action(async (options) => {
    const { runZtunnel } = await import('./ztunnel-command.js');
    process.exitCode = await runZtunnel(options);
  });

program
  .command('control-plane')
  .description('run the control plane: YAML config store, delta ADS (and CA) on loopback, admin endpoint')
  .option('-c, --config <dir>', 'directory of YAML config (watched)')
  .option('--host <ip>', 'loopback address to serve xDS, CA and admin on', '127.0.0.1')
  .option('--port <port>', 'xDS/CA gRPC port (loopback, plaintext)', '15010')
  .option('--admin-port <port>', 'admin port for apply / proxy-status (loopback)', '15014')
  .option('--trust-domain <domain>', 'SPIFFE trust domain', 'cluster.local')
  .option(
    '--ca-dir <dir>',
    'root CA (root-cert.pem, root-key.pem); created there if absent, in memory if not given',
  )
  .option('--roots-file <file>', 'write the trusted roots here for proxies to watch')
  .option('--max-cert-ttl <seconds>', 'upper bound on workload certificate lifetime')
  .option('--socket <path>', 'serve xDS and the CA on this Unix socket (mode 0600) instead of --host:--port')
  .action(async (options) => {
    const { runControlPlane } = await import('./control-plane-command.js');
    process.exitCode = await runControlPlane(options);
  });

program
  .command('apply')
  .description('apply YAML (Pods, Services, Namespaces, policies, waypoints) to a running control plane')
  .requiredOption('-f, --file <file>', 'multi-document YAML file')
  .option('--admin <url>', 'control-plane admin URL', 'http://127.0.0.1:15014')
  .action(async (options) => {
    const { runApply } = await import('./control-plane-command.js');
    process.exitCode = await runApply(options.file, options.admin);
  });

program
  .command('proxy-status')
  .description('per proxy and type: version sent, acked, nacked (with reason), pending, last contact')
  .option('--admin <url>', 'control-plane admin URL', 'http://127.0.0.1:15014')
  .action(async (options) => {
    const { runProxyStatus } = await import('./control-plane-command.js');
    process.exitCode = await runProxyStatus(options.admin);
  });

const ns = program.command('ns').description('namespace-wide operations');
ns.command('l7')
  .description(
    'turn the namespace waypoint on or off; waits until every connected proxy (ztunnels, waypoints) has ACKed',
  )
  .argument('<state>', 'on or off')
  .argument('<namespace>')
  .option('--waypoint <name>', 'waypoint (Gateway) name', 'waypoint')
  .option('--timeout <seconds>', 'how long to wait for ACKs', '10')
  .option('--admin <url>', 'control-plane admin URL', 'http://127.0.0.1:15014')
  .action(async (state: string, namespace: string, options) => {
    const { runNamespaceL7 } = await import('./control-plane-command.js');
    process.exitCode = await runNamespaceL7(state, namespace, options);
  });

program
  .command('waypoint')
  .description('run a per-namespace L7 proxy (HBONE in, routing, L7 policy, resilience, HBONE out)')
  .option('-c, --config <file>', 'waypoint YAML: services, endpoints, HTTPRoutes, L7 policies')
  .option('--address <ip>', "the waypoint's own address (15008 and 15020 listen here)")
  .option('--ca-dir <dir>', 'without a control plane: directory with root-cert.pem and root-key.pem')
  .option('--trust-domain <domain>', 'SPIFFE trust domain')
  .option('--port <port>', 'HBONE port', '15008')
  .option('--metrics-port <port>', '/metrics and /healthz/ready port ("0" disables)', '15020')
  .option('--xds <addr>', 'control plane (host:port or unix:/path): config and certificate from there')
  .option('--token-file <file>', 'node token for the control plane (with --xds)')
  .option('--roots-file <file>', 'trusted roots, watched (with --xds)')
  .option('--gateway <ns/name>', "this waypoint's Gateway: the config resource subscribed to (with --xds)")
  .option(
    '--warm-up-requests <n>',
    'requests sent through its own L7 path before listening, so the first real ones find it compiled ("0" skips)',
  )
  .option(
    '--path-normalization <mode>',
    "Istio's pathNormalization before policy and routes: BASE, MERGE_SLASHES or DECODE_AND_MERGE_SLASHES",
    'BASE',
  )
  .option('--drain-grace <seconds>', 'on SIGTERM, how long requests in flight get to finish', '10')
  .action(async (options) => {
    const { runWaypoint } = await import('@zmesh/waypoint');
    process.exitCode = await runWaypoint(options);
  });

program
  .command('cluster')
  .description('the local cluster of network namespaces (root): up, down or status')
  .argument('<action>', 'up | down | status')
  .option('--spec <file>', 'YAML spec: nodes and pods (name, namespace, serviceAccount, node)')
  .option('--nodes <n>', 'without a spec: a grid of n nodes', '2')
  .option('--pods <m>', 'without a spec: m pods per node', '2')
  .option('--run-id <id>', 'down/status: one run (default: every recorded cluster)')
  .option('--json', 'status as JSON')
  .action(async (action: string, options) => {
    if (!['up', 'down', 'status'].includes(action)) {
      console.error(`zmesh cluster: unknown action ${JSON.stringify(action)} (up, down, status)`);
      process.exitCode = 2;
      return;
    }
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
  .command('noisy-neighbor')
  .description('a victim tenant under four attacks by another tenant, fairness on and off')
  .option('--quick', 'short scenarios (CI)')
  .option('--scenarios <names>', 'comma-separated subset of storm,flood,slow,hoard')
  .option('--fairness <which>', 'on, off or both (default both)')
  .option(
    '--rounds <n>',
    'solo-then-loaded rounds per scenario; the median round is reported (default 3, --quick 1)',
  )
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
  .option('--paths <names>', 'comma-separated substrings: measure only the paths whose names contain one')
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
  .option('--duration <seconds>', 'how long the control plane stays unreachable (default: cert TTL + 5)')
  .option('--cert-ttl <seconds>', 'workload certificate lifetime (time compression)', '12')
  .option('--json <file>', 'write {checks, timeline} as JSON')
  .option('--png <file>', 'write the drill chart as PNG')
  .action(async (options) => {
    const { runOutage } = await import('./outage-command.js');
    process.exitCode = await runOutage(options);
  });

await program.parseAsync(process.argv);
