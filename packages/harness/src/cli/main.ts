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
  .option('--admin-port <port>', 'admin port (/config_dump, /logging, /quitquitquit)', '15000')
  .option('--metrics-port <port>', 'Prometheus /metrics port', '15020')
  .option('--ready-port <port>', 'readiness and liveness port', '15021')
  .action(async (options) => {
    const { runZtunnel } = await import('./ztunnel-command.js');
    process.exitCode = await runZtunnel(options);
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
  .option('--baseline <zmesh-bin>', "another build's bin/zmesh, measured as the 'before' ztunnel pair")
  .option('--workloads <names>', 'comma-separated substrings: run only the steps whose labels contain one')
  .option('--paths <names>', 'comma-separated substrings: measure only the paths whose names contain one')
  .action(async (options) => {
    const { runBench } = await import('../bench/bench.js');
    process.exitCode = await runBench(options);
  });

await program.parseAsync(process.argv);
