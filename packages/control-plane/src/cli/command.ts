import { checked, defaultAdminSocket, intOption, portOption, withExamples } from '@zmesh/shared/cli';
import { Command } from 'commander';
import { defaultStateDir } from '../store/state-dir.js';

/**
 * `zmesh control-plane`: its flags and help. The entry (main.ts) and the operator CLI's
 * help both use this definition; the server (control-plane-command.ts) loads only when it runs.
 */
export function controlPlaneCommand(): Command {
  const cmd = new Command('control-plane')
    .description(
      'run the control plane: YAML config store, delta ADS and the CA (TLS off loopback), admin API',
    )
    .option('-c, --config <dir>', 'directory of YAML config (watched)')
    .option(
      '--host <ip>',
      'address to serve xDS and the CA on: plaintext on loopback; any other address needs --serving-dns (TLS)',
      '127.0.0.1',
    )
    .option('--port <port>', 'xDS/CA gRPC port', checked(portOption), '15010')
    .option(
      '--serving-dns <names>',
      'with a non-loopback --host: serve TLS with a certificate from the mesh CA for these DNS names (comma-separated, e.g. the Service name) and --host, renewed before expiry',
    )
    .option(
      '--admin-socket <path>',
      `admin API (apply, delete, ns l7, node tokens, metrics) on this Unix socket, mode 0600 (default ${defaultAdminSocket()})`,
    )
    .option(
      '--admin-port <port>',
      'admin API on loopback TCP instead (--host when loopback, else 127.0.0.1); requires --admin-token-file',
      checked(portOption),
    )
    .option('--admin-token-file <file>', 'bearer token the TCP admin port requires (16+ characters)')
    .option('--trust-domain <domain>', 'SPIFFE trust domain', 'cluster.local')
    .option(
      '--ca-dir <dir>',
      'root CA (root-cert.pem, root-key.pem); created there if absent, in memory if not given',
    )
    .option(
      '--state-dir <dir>',
      `keep applied objects, the node-token key and the CA root here (SQLite, Node 22.5+); default ${defaultStateDir()} (in memory, with a warning, on an older Node)`,
    )
    .option('--no-state-dir', 'keep state in memory only: a restart forgets every applied object')
    .option(
      '--store <url>',
      'share state with other replicas in etcd: etcd://host:port[,host:port...] (instead of --state-dir)',
    )
    .option('--roots-file <file>', 'write the trusted roots here for proxies to watch')
    .option(
      '--max-cert-ttl <seconds>',
      'upper bound on workload certificate lifetime',
      checked(intOption(1, 31_536_000, 'seconds')),
    )
    .option(
      '--socket <path>',
      'serve xDS and the CA on this Unix socket (mode 0600) instead of --host:--port',
    )
    .option(
      '--kubernetes',
      'read config from the Kubernetes API (informers) instead of --config; elect a leader on a Lease for writes',
    )
    .option(
      '--kubeconfig <file>',
      'with --kubernetes: this kubeconfig instead of the in-cluster ServiceAccount',
    )
    .option(
      '--pod-namespace <ns>',
      "with --kubernetes: the control plane's namespace, where its Lease lives (default $POD_NAMESPACE, else zmesh-system)",
    )
    .option(
      '--pod-name <name>',
      'with --kubernetes: this replica in the Lease (default $POD_NAME, else the host name)',
    )
    .option(
      '--lease-duration <seconds>',
      'with --kubernetes: how long a leader holds the Lease without renewing',
      checked(intOption(1, 3600, 'seconds')),
      '15',
    )
    .option(
      '--waypoint-image <image>',
      'with --kubernetes: the image of waypoint Deployments (default: this build)',
    )
    .option(
      '--token-audience <aud>',
      "with --kubernetes: audience of the proxies' projected tokens (the control plane's TokenReview checks it)",
      'zmesh',
    )
    .option(
      '--node-service-accounts <ns/name,...>',
      "with --kubernetes: the ServiceAccounts whose pods' tokens authenticate node proxies (default <pod-namespace>/zmesh-node)",
    )
    .action(async (options) => {
      const { runControlPlane } = await import('./control-plane-command.js');
      process.exitCode = await runControlPlane(options);
    });
  return withExamples(
    cmd,
    'zmesh control-plane --config ./mesh --state-dir /var/lib/zmesh --roots-file ./roots.pem',
    'zmesh control-plane --no-state-dir --ca-dir ./ca --admin-socket /tmp/zmesh/admin.sock',
    'zmesh control-plane --store etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --port 15010',
  );
}
