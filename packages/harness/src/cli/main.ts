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
  .option('--admin-port <port>', 'admin port (/config_dump, /logging, /quitquitquit)', '15000')
  .option('--metrics-port <port>', 'Prometheus /metrics port', '15020')
  .option('--ready-port <port>', 'readiness and liveness port', '15021')
  .action(async (options) => {
    const { runZtunnel } = await import('./ztunnel-command.js');
    await runZtunnel(options);
  });

program
  .command('demo')
  .description('run a local two-node mesh with real traffic and print what each side saw')
  .action(async () => {
    const { runDemo } = await import('../demo/demo.js');
    process.exitCode = await runDemo();
  });

await program.parseAsync(process.argv);
