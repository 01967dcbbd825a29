import {
  type AccessLogPolicy,
  CertificateAuthority,
  cgroup2MountOf,
  configFileRefused,
  DEFAULT_ACCESS_LOG_RATE,
  formatHostPort,
  IdleReclaim,
  logger,
  openControlPlaneIdentity,
  parseAccessLogMode,
  parseNamespaceModes,
  readCaDir,
  seqpacketUnavailableReason,
  startFailure,
  TrustBundle,
} from '@zmesh/shared';
import { Registry } from 'prom-client';
import { drainOnCertChange } from '../identity/cert-drain.js';
import type { CertificateSigner } from '../identity/cert-manager.js';
import { LocalCaSigner } from '../identity/local-ca-signer.js';
import { keysDirError, PersistedKeys } from '../identity/persisted-keys.js';
import type { ConfigTarget } from '../state/config-target.js';
import { type LocalConfig, loadLocalConfig } from '../state/local-config.js';
import { XdsConfigSource } from '../state/xds-config-source.js';
import type { QuotaLimits } from '../tenancy/index.js';
import { sharedQuotaBuffer } from '../tenancy/shared-quotas.js';
import { autoWorkers } from '../workers/worker-count.js';
import { ZtunnelWorkers } from '../workers/worker-pool.js';
import { Ztunnel } from '../ztunnel.js';
import type { InboundLimits } from '../ztunnel-options.js';
import { OptimizerGate } from './optimizer-gate.js';

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
  zdsSocket?: string;
  cgroupRoot?: string;
  captureScope?: string;
  fairness?: string;
  tenantConnectRate?: string;
  tenantConnectBurst?: string;
  tenantMaxConnections?: string;
  maxPreauthPerSource?: string;
  maxPreauth?: string;
  handshakeTimeoutMs?: string;
  pingIntervalMs?: string;
  fdReserve?: string;
  xds?: string;
  tokenFile?: string;
  rootsFile?: string;
  snapshot?: string;
  trustCaRoots?: boolean;
  persistKeys?: string;
  maxSnapshotAge?: string;
  authzMaxStaleness?: string;
  xdsBackoff?: string;
  accessLog?: string;
  accessLogNamespaces?: string;
  accessLogRate?: string;
  /** Seconds a SIGTERM drain keeps open connections (default 3600). */
  drainGrace?: string;
  /** Event-loop threads (src/workers/); 1 is the single loop. */
  workers?: number | string;
}

/**
 * Trust, signing and config for one of the two modes; `start` and `stop` bracket the proxy's
 * life. `start` resolves once the config at hand (the file, or the on-disk snapshot) is
 * applied; pods are enrolled only after that.
 */
interface Mode {
  bundle: TrustBundle;
  signer: CertificateSigner;
  start(z: ConfigTarget): Promise<void>;
  stop(): Promise<void>;
}

/** Istio's ztunnel drains for far less; a long-lived connection here keeps its hour. */
const DEFAULT_DRAIN_GRACE_SECONDS = 3600;

/**
 * `zmesh ztunnel`: with --xds, config and certificates come from the control plane (the
 * local --config, if any, supplies only forward listeners); without it, explicit-proxy mode
 * from a local config file and a local CA (docs/design.md §11). Exits 2 when a flag is
 * invalid, 1 with ZM_ERR_CONFIG_INVALID and every reason when the config file is, 1 naming the listener, address and errno when a port cannot be bound
 * (ZM_ERR_LISTEN_BIND). SIGTERM drains (stops accepting, GOAWAY, keeps open connections up
 * to --drain-grace: docs/upgrade.md); SIGINT, a second SIGTERM or POST /quitquitquit stop at once.
 */
export async function runZtunnel(opts: ZtunnelCommandOptions): Promise<number> {
  const usage = usageError(opts);
  if (usage) {
    console.error(`zmesh ztunnel: ${usage}`);
    return 2;
  }
  let config: LocalConfig | undefined;
  if (opts.config) {
    const loaded = await loadLocalConfig(opts.config);
    if (!loaded.ok) return startFailure('ztunnel', configFileRefused(opts.config, loaded.error));
    config = loaded.value;
  }
  const keys = opts.persistKeys ? await openKeys(opts.persistKeys) : undefined;
  if (typeof keys === 'string') {
    console.error(`zmesh ztunnel: ${keys}`);
    return 2;
  }
  let mode: Mode | string;
  try {
    mode = opts.xds ? await controlPlaneMode(opts, config) : await localMode(opts, config!);
  } catch (e) {
    return startFailure('ztunnel', e);
  }
  if (typeof mode === 'string') {
    console.error(`zmesh ztunnel: ${mode}`);
    return 2;
  }
  const signals = firstSignal();
  try {
    const workers = workerCount(opts.workers);
    if (workers > 1) return await runWorkers(opts, mode, workers, keys, signals.signalled);
    return await runSingle(opts, mode, keys, signals.signalled);
  } finally {
    signals.dispose();
  }
}

/** The single event loop (`--workers 1`, or `auto` on one CPU). */
async function runSingle(
  opts: ZtunnelCommandOptions,
  mode: Mode,
  keys: PersistedKeys | undefined,
  signalled: Promise<NodeJS.Signals>,
): Promise<number> {
  const backoff = parseBackoff(opts.xdsBackoff);
  const registry = new Registry();
  let ztunnel: Ztunnel;
  try {
    ztunnel = new Ztunnel({
      node: opts.node!,
      address: opts.address ?? '127.0.0.1',
      ports: {
        admin: Number(opts.adminPort),
        metrics: Number(opts.metricsPort),
        ready: Number(opts.readyPort),
      },
      bundle: mode.bundle,
      signer: mode.signer,
      ...(keys ? { persistedKeys: keys } : {}),
      passthrough: opts.passthrough === 'allow' ? 'allow' : 'deny',
      registry,
      tenancy: { fairness: opts.fairness !== 'off', limits: tenantLimits(opts) },
      accessLog: accessLogPolicy(opts) as AccessLogPolicy,
      inboundLimits: inboundLimits(opts),
      ...(backoff ? { certBackoff: backoff } : {}),
      ...(opts.zdsSocket
        ? {
            capture: await captureMode(
              opts.captureScope ?? opts.node!,
              opts.zdsSocket,
              opts.cgroupRoot ?? cgroup2Mount(),
              registry,
            ),
          }
        : {}),
    });
  } catch (e) {
    await mode.stop();
    return startFailure('ztunnel', e);
  }
  const undrain = drainOnCertChange(ztunnel.certs, ztunnel.pool);
  const stop = async () => {
    undrain();
    await mode.stop();
    await ztunnel.stop();
  };
  try {
    await ztunnel.start();
    await mode.start(ztunnel);
    ztunnel.startEnrolment();
  } catch (e) {
    // A port already taken: close the listeners that did bind before saying which one failed.
    await stop();
    return startFailure('ztunnel', e);
  }
  const optimizer = new OptimizerGate({ ready: () => ztunnel.readiness().ready });
  const reclaim = new IdleReclaim({ registry });
  if (!opts.zdsSocket)
    log.warn('explicit-proxy mode: no capture, no strict inbound; attribution comes from forward listeners');
  await untilSignal(opts, signalled, (ms) => ztunnel.drain(ms));
  optimizer.stop();
  reclaim.stop();
  log.info('shutting down');
  await stop();
  return 0;
}

/**
 * The first SIGINT or SIGTERM. Listened for before anything starts: a signal during start-up
 * is then answered once start-up ends, instead of killing the process by default action.
 */
function firstSignal(): { signalled: Promise<NodeJS.Signals>; dispose(): void } {
  const handlers: Array<[NodeJS.Signals, () => void]> = [];
  // Removed at the first signal (a second one during start-up then stops the process by
  // default action) and on every return, so no path is left deaf to signals.
  const dispose = () => {
    for (const [sig, handler] of handlers) process.off(sig, handler);
  };
  const signalled = new Promise<NodeJS.Signals>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) {
      const handler = () => {
        dispose();
        resolve(sig);
      };
      handlers.push([sig, handler]);
      process.on(sig, handler);
    }
  });
  return { signalled, dispose };
}

/**
 * Resolves on SIGINT, or on SIGTERM once `drain` ends (a second signal during the drain
 * stops at once).
 */
async function untilSignal(
  opts: ZtunnelCommandOptions,
  first: Promise<NodeJS.Signals>,
  drain: (ms: number) => Promise<void>,
): Promise<void> {
  const signal = await first;
  if (signal !== 'SIGTERM') return;
  log.info({ graceSeconds: drainGraceSeconds(opts) }, 'SIGTERM: draining');
  const now = new Promise<void>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
  });
  await Promise.race([drain(drainGraceSeconds(opts) * 1000), now]);
}

/**
 * `--workers N` (N > 1; `auto` on a machine with more than one CPU): this thread keeps the config source, the signer, admin
 * and the ZDS connection; N worker threads serve the pods (src/workers/worker-pool.ts). Tenant
 * quotas are counted node-wide in one SharedArrayBuffer; the access-log rate is split
 * between the workers so the node's total stays the flag's.
 */
async function runWorkers(
  opts: ZtunnelCommandOptions,
  mode: Mode,
  count: number,
  keys: PersistedKeys | undefined,
  signalled: Promise<NodeJS.Signals>,
): Promise<number> {
  const registry = new Registry();
  const backoff = parseBackoff(opts.xdsBackoff);
  let zds: { socket: string; cgroupRoot: string } | undefined;
  if (opts.zdsSocket) {
    const { BpfCapture } = await import('../capture/index.js');
    const why = (await BpfCapture.unavailableReason()) ?? seqpacketUnavailableReason();
    if (why) {
      console.error(`zmesh ztunnel: capture mode unavailable: ${why}`);
      await mode.stop();
      return 2;
    }
    zds = { socket: opts.zdsSocket, cgroupRoot: opts.cgroupRoot ?? cgroup2Mount() };
  }
  // V8's optimizers on before any worker isolate exists: an isolate keeps the flags it was
  // made with, so the gate's later switch reached the main thread only and the workers ran
  // interpreted (a fifth of the throughput in `zmesh harness worker-bench`).
  const optimizer = new OptimizerGate({ ready: () => true });
  const access = accessLogPolicy(opts) as AccessLogPolicy;
  const perWorkerRate = Math.max(1, Math.floor(access.ratePerSecond / count));
  const pool = new ZtunnelWorkers({
    count,
    init: {
      node: opts.node!,
      address: opts.address ?? '127.0.0.1',
      trustDomain: opts.trustDomain,
      passthrough: opts.passthrough === 'allow' ? 'allow' : 'deny',
      tenancy: {
        fairness: opts.fairness !== 'off',
        limits: tenantLimits(opts),
        sharedQuotas: sharedQuotaBuffer(),
      },
      accessLog: { ...access, ratePerSecond: perWorkerRate, burst: 2 * perWorkerRate },
      inboundLimits: inboundLimits(opts),
      ...(backoff ? { certBackoff: backoff } : {}),
      ...(keys ? { persistKeys: keys.dir } : {}),
      ...(zds ? { capture: { scope: opts.captureScope ?? opts.node!, cgroupRoot: zds.cgroupRoot } } : {}),
    },
    bundle: mode.bundle,
    signer: mode.signer,
    ports: {
      admin: Number(opts.adminPort),
      metrics: Number(opts.metricsPort),
      ready: Number(opts.readyPort),
    },
    registry,
    ...(zds ? { zds } : {}),
    onFatal: () => process.kill(process.pid, 'SIGINT'),
  });
  try {
    await pool.start();
    await mode.start(pool);
    pool.startEnrolment();
  } catch (e) {
    await mode.stop();
    await pool.stop();
    return startFailure('ztunnel', e);
  }
  const reclaim = new IdleReclaim({ registry });
  await untilSignal(opts, signalled, (ms) => pool.drain(ms));
  optimizer.stop();
  reclaim.stop();
  log.info('shutting down');
  await mode.stop();
  await pool.stop();
  return 0;
}

/** The --persist-keys directory, or why it is refused (checked before anything starts). */
async function openKeys(dir: string): Promise<PersistedKeys | string> {
  const opened = await PersistedKeys.open(dir);
  if (!opened.ok) return keysDirError(dir, opened.error).message;
  const removed = await opened.value.prune().catch(() => 0);
  log.info(
    { dir, removed },
    'persisted workload keys: expired and unreadable ones removed; valid ones are used on first request',
  );
  return opened.value;
}

/** `--workers`: a number, or `auto` (the default; the choice and its reasons are logged). */
function workerCount(flag: number | string | undefined): number {
  if (flag !== undefined && flag !== 'auto') return Number(flag);
  const choice = autoWorkers();
  log.info(choice, `--workers auto: ${choice.workers}`);
  return choice.workers;
}

/** `initialMs:maxMs`; undefined keeps the defaults. */
function parseBackoff(text?: string): { initialMs: number; maxMs: number } | undefined {
  const [initialMs, maxMs] = (text ?? '').split(':').map(Number);
  if (!initialMs || !maxMs || initialMs <= 0 || maxMs < initialMs) return undefined;
  return { initialMs, maxMs };
}

const TENANT_LIMIT_FLAGS = {
  connectRate: ['--tenant-connect-rate', 'tenantConnectRate'],
  connectBurst: ['--tenant-connect-burst', 'tenantConnectBurst'],
  maxConnections: ['--tenant-max-connections', 'tenantMaxConnections'],
} as const;

const INBOUND_LIMIT_FLAGS = {
  maxPreauthPerSource: ['--max-preauth-per-source', 'maxPreauthPerSource'],
  maxPreauth: ['--max-preauth', 'maxPreauth'],
  handshakeTimeoutMs: ['--handshake-timeout-ms', 'handshakeTimeoutMs'],
  pingIntervalMs: ['--ping-interval-ms', 'pingIntervalMs'],
  fdReserve: ['--fd-reserve', 'fdReserve'],
} as const;

/** The HBONE pre-authentication bounds an operator overrode (validated by usageError). */
function inboundLimits(opts: ZtunnelCommandOptions): InboundLimits {
  const limits: InboundLimits = {};
  for (const [key, [, field]] of Object.entries(INBOUND_LIMIT_FLAGS)) {
    const text = opts[field];
    if (text !== undefined) limits[key as keyof InboundLimits] = Number(text);
  }
  return limits;
}

/** The per-tenant quota defaults an operator overrode on the command line. */
function tenantLimits(opts: ZtunnelCommandOptions): Partial<QuotaLimits> {
  const limits: Partial<Record<keyof typeof TENANT_LIMIT_FLAGS, number>> = {};
  for (const [key, [, field]] of Object.entries(TENANT_LIMIT_FLAGS)) {
    const text = opts[field];
    if (text !== undefined) limits[key as keyof typeof TENANT_LIMIT_FLAGS] = Number(text);
  }
  return limits;
}

function usageError(opts: ZtunnelCommandOptions): string | undefined {
  if (!opts.node) return '--node is required';
  const access = accessLogPolicy(opts);
  if (typeof access === 'string') return access;
  for (const [flag, field] of [...Object.values(TENANT_LIMIT_FLAGS), ...Object.values(INBOUND_LIMIT_FLAGS)]) {
    const text = opts[field];
    if (text !== undefined && !(Number.isInteger(Number(text)) && Number(text) > 0))
      return `${flag}: want a positive integer, got ${text}`;
  }
  if (opts.xdsBackoff && !parseBackoff(opts.xdsBackoff))
    return `--xds-backoff: want initialMs:maxMs with 0 < initial <= max, got ${opts.xdsBackoff}`;
  if (opts.drainGrace !== undefined && !/^\d{1,7}$/.test(opts.drainGrace))
    return `--drain-grace: want seconds (0..9999999), got ${opts.drainGrace}`;
  if (opts.persistKeys && !opts.xds) return '--persist-keys needs --xds (a local CA never goes away)';
  if (opts.xds) {
    if (!opts.tokenFile || !opts.rootsFile) return '--xds needs --token-file and --roots-file';
    return undefined;
  }
  if (!opts.config || !opts.caDir)
    return '--config and --ca-dir are required without --xds (explicit-proxy mode)';
  return undefined;
}

/** --drain-grace in seconds: how long a SIGTERM drain keeps open connections (default 1 h). */
function drainGraceSeconds(opts: ZtunnelCommandOptions): number {
  return Number(opts.drainGrace ?? DEFAULT_DRAIN_GRACE_SECONDS);
}

/** The access-log flags as a policy, or the usage error that names the flag. */
function accessLogPolicy(opts: ZtunnelCommandOptions): AccessLogPolicy | string {
  const mode = parseAccessLogMode(opts.accessLog ?? 'on');
  if (!mode.ok) return `--access-log: ${mode.error}`;
  const namespaces = parseNamespaceModes(opts.accessLogNamespaces ?? '');
  if (!namespaces.ok) return `--access-log-namespaces: ${namespaces.error}`;
  const rate = Number(opts.accessLogRate ?? DEFAULT_ACCESS_LOG_RATE);
  if (!/^\d{1,6}$/.test(opts.accessLogRate ?? '100') || rate < 1)
    return `--access-log-rate: want lines per second (1..999999), got ${opts.accessLogRate}`;
  return { mode: mode.value, namespaces: namespaces.value, ratePerSecond: rate, burst: 2 * rate };
}

async function localMode(opts: ZtunnelCommandOptions, config: LocalConfig): Promise<Mode> {
  const ca = await CertificateAuthority.fromPem({
    trustDomain: opts.trustDomain,
    ...(await readCaDir(opts.caDir!)),
  });
  return {
    bundle: new TrustBundle(opts.trustDomain, [ca.rootPem]),
    signer: new LocalCaSigner(ca),
    start: async (z) => {
      await z.applyConfig(config);
    },
    stop: async () => {},
  };
}

/** Roots from the watched file, certificates from the CA API, config over delta ADS. */
async function controlPlaneMode(opts: ZtunnelCommandOptions, config?: LocalConfig): Promise<Mode | string> {
  const backoff = parseBackoff(opts.xdsBackoff);
  const identity = await openControlPlaneIdentity({
    address: opts.xds!,
    tokenFile: opts.tokenFile!,
    rootsFile: opts.rootsFile!,
    trustDomain: opts.trustDomain,
    trustRootsFromCa: opts.trustCaRoots === true,
    ...(backoff ? { backoff } : {}),
  });
  const { token, bundle, ca } = identity;
  let source: XdsConfigSource | undefined;
  return {
    bundle,
    signer: ca,
    start: async (z) => {
      source = new XdsConfigSource({
        ztunnel: z,
        address: opts.xds!,
        node: opts.node!,
        proxyAddress: opts.address ?? '127.0.0.1',
        adminAddress: formatHostPort(opts.address ?? '127.0.0.1', Number(opts.adminPort)),
        token: () => token.token,
        refreshToken: () => token.reread(),
        roots: bundle,
        ...(opts.snapshot ? { snapshotPath: opts.snapshot } : {}),
        ...(config ? { forwards: config.forwards } : {}),
        ...(backoff ? { backoff } : {}),
        maxSnapshotAgeMs: Number(opts.maxSnapshotAge ?? 604_800) * 1000,
        ...(opts.authzMaxStaleness ? { authzMaxStalenessMs: Number(opts.authzMaxStaleness) * 1000 } : {}),
      });
      await source.start();
      // The on-disk snapshot, when there is one, is applied before pods are enrolled.
      await source.idle();
    },
    stop: async () => {
      await source?.stop();
      identity.close();
    },
  };
}

/** Capture mode needs root and BPF; without them the reason is printed and nothing starts. */
async function captureMode(scope: string, zdsSocket: string, cgroupRoot: string, registry: Registry) {
  const { BpfCapture } = await import('../capture/index.js');
  const why = (await BpfCapture.unavailableReason()) ?? seqpacketUnavailableReason();
  if (why) {
    console.error(`zmesh ztunnel: capture mode unavailable: ${why}`);
    process.exit(2);
  }
  return { bpf: new BpfCapture({ node: scope, registry }), zdsSocket, cgroupRoot };
}

/** Where the cgroup v2 hierarchy is mounted (kubelet's pod cgroups sit under it). */
function cgroup2Mount(): string {
  return cgroup2MountOf() ?? '/sys/fs/cgroup';
}
