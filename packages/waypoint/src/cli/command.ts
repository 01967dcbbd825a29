import { checked, intOption, numberOption, oneOf, portOption, withExamples } from '@zmesh/shared/cli';
import { Command } from 'commander';

/**
 * `zmesh waypoint`: its flags and help. The entry (main.ts) and the operator CLI's help
 * both use this definition; the proxy itself (waypoint-command.ts) loads only when it runs.
 */
export function waypointCommand(): Command {
  const cmd = new Command('waypoint')
    .description('run a per-namespace L7 proxy (HBONE in, routing, L7 policy, resilience, HBONE out)')
    .option('-c, --config <file>', 'waypoint YAML: services, endpoints, HTTPRoutes, L7 policies')
    .option('--address <ip>', "the waypoint's own address (15008 and 15020 listen here)")
    .option('--ca-dir <dir>', 'without a control plane: directory with root-cert.pem and root-key.pem')
    .option('--trust-domain <domain>', 'SPIFFE trust domain')
    .option('--port <port>', 'HBONE port', checked(portOption), '15008')
    .option(
      '--metrics-port <port>',
      '/metrics and /healthz/ready port ("0" disables)',
      checked(portOption),
      '15020',
    )
    .option(
      '--xds <addr[,addr…]>',
      'control plane (host:port or unix:/path; several for failover): config and certificate from there',
    )
    .option('--token-file <file>', 'node token for the control plane (with --xds)')
    .option('--roots-file <file>', 'trusted roots, watched (with --xds)')
    .option('--gateway <ns/name>', "this waypoint's Gateway: the config resource subscribed to (with --xds)")
    .option(
      '--warm-up-requests <n>',
      'requests sent through its own L7 path before listening, so the first real ones find it compiled ("0" skips)',
      checked(intOption(0, 100_000)),
    )
    .option(
      '--path-normalization <mode>',
      "Istio's pathNormalization before policy and routes: BASE, MERGE_SLASHES or DECODE_AND_MERGE_SLASHES",
      checked(oneOf('BASE', 'MERGE_SLASHES', 'DECODE_AND_MERGE_SLASHES')),
      'BASE',
    )
    .option(
      '--num-trusted-proxies <n>',
      "Istio's numTrustedProxies: X-Forwarded-For hops in front of the waypoint that remote.ip and remoteIpBlocks believe",
      checked(intOption(0, 99)),
      '0',
    )
    .option(
      '--drain-grace <seconds>',
      'on SIGTERM, how long requests in flight get to finish',
      checked(numberOption(0, 3600, 'seconds')),
      '10',
    )
    .action(async (options) => {
      const { runWaypoint } = await import('./waypoint-command.js');
      process.exitCode = await runWaypoint(options);
    });
  return withExamples(
    cmd,
    'zmesh waypoint --xds 127.0.0.1:15010 --gateway shop/waypoint --token-file t --roots-file roots.pem --address 10.244.1.9',
    'zmesh waypoint --config waypoint.yaml --ca-dir ./ca --address 127.0.0.9',
  );
}
