import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CertificateAuthority, logger, TrustBundle } from '@zmesh/shared';
import { LocalCaSigner, loadLocalConfig, Ztunnel } from '@zmesh/ztunnel';
import { Registry } from 'prom-client';

const log = logger('cli');

export interface ZtunnelCommandOptions {
  config?: string;
  node?: string;
  address?: string;
  caDir?: string;
  trustDomain: string;
  passthrough: string;
  adminPort: string;
  metricsPort: string;
  readyPort: string;
  agentSocket?: string;
  captureScope?: string;
}

/**
 * `zmesh ztunnel`: explicit-proxy mode from a local config file (DESIGN §11). Exits
 * non-zero with every reason when the config is invalid; stops cleanly on SIGINT/SIGTERM
 * or POST /quitquitquit.
 */
export async function runZtunnel(opts: ZtunnelCommandOptions): Promise<number> {
  if (!opts.config || !opts.node || !opts.caDir) {
    console.error('zmesh ztunnel: --config, --node and --ca-dir are required in explicit-proxy mode');
    return 2;
  }
  const config = await loadLocalConfig(opts.config);
  if (!config.ok) {
    for (const reason of config.error) console.error(`zmesh ztunnel: ${reason}`);
    return 2;
  }
  const ca = await CertificateAuthority.fromPem({
    trustDomain: opts.trustDomain,
    certPem: await readFile(join(opts.caDir, 'root-cert.pem'), 'utf8'),
    keyPem: await readFile(join(opts.caDir, 'root-key.pem'), 'utf8'),
  });
  const registry = new Registry();
  const ztunnel = new Ztunnel({
    node: opts.node,
    address: opts.address ?? '127.0.0.1',
    ports: {
      admin: Number(opts.adminPort),
      metrics: Number(opts.metricsPort),
      ready: Number(opts.readyPort),
    },
    bundle: new TrustBundle(opts.trustDomain, [ca.rootPem]),
    signer: new LocalCaSigner(ca),
    passthrough: opts.passthrough === 'allow' ? 'allow' : 'deny',
    registry,
    ...(opts.agentSocket
      ? { capture: await captureMode(opts.captureScope ?? opts.node, opts.agentSocket, registry) }
      : {}),
  });
  await ztunnel.start();
  await ztunnel.applyConfig(config.value);
  if (!opts.agentSocket)
    log.warn('explicit-proxy mode: no capture, no strict inbound; attribution comes from forward listeners');
  const done = new Promise<void>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
  });
  await done;
  log.info('shutting down');
  await ztunnel.stop();
  return 0;
}

/** Capture mode needs root and BPF; without them the reason is printed and nothing starts. */
async function captureMode(scope: string, agentSocket: string, registry: Registry) {
  const { BpfCapture } = await import('@zmesh/ztunnel');
  const why = await BpfCapture.unavailableReason();
  if (why) {
    console.error(`zmesh ztunnel: capture mode unavailable: ${why}`);
    process.exit(2);
  }
  return { bpf: new BpfCapture({ node: scope, registry }), agentSocket };
}
