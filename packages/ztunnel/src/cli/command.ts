import { checked, intOption, numberOption, oneOf, portOption, withExamples } from '@zmesh/shared/cli';
import { Command } from 'commander';

/**
 * `zmesh ztunnel`: its flags and help. The entry (main.ts) and the operator CLI's help both
 * use this definition; the daemon itself (ztunnel-command.ts) loads only when it runs.
 */
export function ztunnelCommand(): Command {
  const cmd = new Command('ztunnel')
    .description('run the node proxy')
    .option('-c, --config <file>', 'local YAML config (workloads, services, policies)')
    .option('--node <name>', '(required) this node name')
    .option('--address <ip>', 'loopback address of this ztunnel in explicit-proxy mode (127.0.0.N)')
    .option(
      '--ca-dir <dir>',
      'explicit-proxy mode without a control plane: directory with root-cert.pem and root-key.pem',
    )
    .option('--trust-domain <domain>', 'SPIFFE trust domain', 'cluster.local')
    .option(
      '--passthrough <allow|deny>',
      'destinations outside the mesh: plain TCP or refused',
      checked(oneOf('allow', 'deny')),
      'deny',
    )
    .option(
      '--fairness <on|off>',
      'tenant isolation: quotas, fair setup queue, fair byte copying, shared HTTP/2 stream windows, bounded send buffers (off: plain FIFO)',
      checked(oneOf('on', 'off')),
      'on',
    )
    .option(
      '--tenant-connect-rate <n>',
      'per-tenant quota: sustained new connections per second (default 500)',
    )
    .option('--tenant-connect-burst <n>', 'per-tenant quota: connections opened in a burst (default 1000)')
    .option('--tenant-max-connections <n>', 'per-tenant quota: open connections at once (default 4096)')
    .option(
      '--max-preauth-per-source <n>',
      'HBONE: connections one source may hold before authenticating (default 64)',
    )
    .option('--max-preauth <n>', 'HBONE: connections before authenticating, node-wide (default 1024)')
    .option(
      '--handshake-timeout-ms <ms>',
      'HBONE: TLS, HTTP/2 preface and first SETTINGS must finish within this (default 10000)',
    )
    .option(
      '--ping-interval-ms <ms>',
      'HBONE: PING each inbound session this often; one that does not answer within twice this (a peer that stopped reading) is closed (default 10000)',
    )
    .option(
      '--fd-reserve <n>',
      'file descriptors kept free for established flows; new inbound connections are refused below it (default 256)',
    )
    .option(
      '--workers <n|auto>',
      'event-loop threads; pods are sharded across them, tenant quotas stay node-wide (auto: the CPUs the process may use, by affinity and cgroup quota, at most 4; 1: one loop)',
      checked((v) => (v === 'auto' ? v : intOption(1, 16, 'threads')(v))),
      'auto',
    )
    .option('--capture-scope <name>', 'capture mode: BPF pin scope (default: the node name)')
    .option(
      '--zds-socket <path>',
      "capture mode: the node agent's ZDS socket pods are enrolled through (Istio's protocol; needs root and BPF)",
    )
    .option(
      '--cgroup-root <dir>',
      "capture mode: where kubelet's pod cgroups are found (default: the cgroup v2 mount)",
    )
    .option(
      '--xds <host:port[,host:port…]>',
      'control plane (xDS and CA), several for failover; --config then only supplies forwards',
    )
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
    .option(
      '--max-snapshot-age <seconds>',
      'refuse an on-disk snapshot older than this at start',
      checked(numberOption(0, 1e9, 'seconds')),
      '604800',
    )
    .option(
      '--authz-max-staleness <seconds>',
      'authorization last-known-good limit during an outage (default: the workload certificate lifetime)',
      checked(numberOption(0, 1e9, 'seconds')),
    )
    .option(
      '--xds-backoff <initialMs:maxMs>',
      'xDS reconnect and certificate retry backoff bounds',
      '500:30000',
    )
    .option('--access-log <mode>', 'one line per connection: on, off or sample:F (F in (0, 1])', 'on')
    .option(
      '--access-log-namespaces <ns=mode,...>',
      'per-namespace access-log modes, e.g. shop=off,front=sample:0.1',
    )
    .option(
      '--access-log-rate <lines/s>',
      'access-log lines per second, node-wide (a burst of twice that)',
      '100',
    )
    .option(
      '--drain-grace <seconds>',
      'on SIGTERM: stop accepting, GOAWAY, keep open connections this long, then exit (default 3600)',
    )
    .option(
      '--admin-port <port>',
      'admin port (/config_dump, /logging, /quitquitquit, /debug/*)',
      checked(portOption),
      '15000',
    )
    .option('--metrics-port <port>', 'Prometheus /metrics port', checked(portOption), '15020')
    .option('--ready-port <port>', 'readiness and liveness port', checked(portOption), '15021')
    .action(async (options) => {
      const { runZtunnel } = await import('./ztunnel-command.js');
      process.exitCode = await runZtunnel(options);
    });
  return withExamples(
    cmd,
    'zmesh ztunnel --node node-a --xds 127.0.0.1:15010 --token-file node-a.token --roots-file roots.pem',
    'zmesh ztunnel --node n --config mesh.yaml --ca-dir ./ca --address 127.0.0.2   # explicit-proxy mode',
  );
}
