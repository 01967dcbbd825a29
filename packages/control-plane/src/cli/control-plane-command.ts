import { constants } from 'node:fs';
import { access, chmod, rm, stat } from 'node:fs/promises';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import {
  BUILD_INFO,
  defaultAdminSocket,
  isLoopbackHost,
  readAdminToken,
  startFailure,
  ZmeshError,
} from '@zmesh/shared';
import { type AdminListen, type AdminServer, startAdminServer } from '../admin-server.js';
import {
  caReadiness,
  loadOrCreateCa,
  loadOrCreateCaInShared,
  loadOrCreateCaInStore,
  writeRootsFile,
} from '../ca-files.js';
import { ControlPlane, sharedNodeTokenKey } from '../control-plane.js';
import type { KubeController } from '../kubernetes/kube-controller.js';
import { ServingCredentials } from '../serving-cert.js';
import { defaultStateDir, SqliteStateStore, sqliteAvailable } from '../store/sqlite-store.js';
import { MemoryStateStore, type SharedStateStore, type StateStore } from '../store/state-store.js';

export interface ControlPlaneCommandOptions {
  config?: string;
  port: string;
  /** Admin API on loopback TCP (needs adminTokenFile) instead of the Unix socket. */
  adminPort?: string;
  adminTokenFile?: string;
  adminSocket?: string;
  trustDomain: string;
  caDir?: string;
  /** A directory, or false for `--no-state-dir` (commander's negation); absent: the default. */
  stateDir?: string | boolean;
  /** `etcd://host:port[,…]`: state shared with other replicas, instead of stateDir. */
  store?: string;
  rootsFile?: string;
  maxCertTtl?: string;
  host: string;
  /** Comma-separated DNS names of the TLS serving certificate (a non-loopback host needs them). */
  servingDns?: string;
  /** xDS and CA on this Unix socket (mode 0600) instead of host:port. */
  socket?: string;
  kubernetes?: boolean;
  kubeconfig?: string;
  podNamespace?: string;
  podName?: string;
  leaseDuration?: string;
  waypointImage?: string;
  tokenAudience?: string;
  nodeServiceAccounts?: string;
}

/**
 * `zmesh control-plane`: config store (watched directory) → xDS and the CA on loopback, plus
 * the admin endpoint that `zmesh apply`, `zmesh proxy-status` and `zmesh ns` talk to. The
 * CA root comes from --ca-dir (created there if absent; in memory without it); the roots
 * proxies must trust are written to --roots-file, which they watch. Resolves with 0 once
 * serving (SIGINT/SIGTERM then stop it), or with 1 and one line naming the reason when it
 * cannot start (a port in use, a refused address or config, a state store it cannot read:
 * never an empty start over a store it could not read).
 *
 * State (applied objects, generation, node-token key, and the CA root unless --ca-dir names
 * one) lives in --state-dir (default: `defaultStateDir()`), or in memory with --no-state-dir,
 * or with --store etcd://… in etcd, shared by every replica pointed at it.
 */
export async function runControlPlane(options: ControlPlaneCommandOptions): Promise<number> {
  let state: StateStore;
  let shared: SharedStateStore | undefined;
  let cp: ControlPlane;
  let ca: Awaited<ReturnType<typeof loadOrCreateCa>>;
  // Read before anything starts: a token file that cannot be read must not leave a state
  // directory and a new root CA behind it.
  let adminToken = '';
  try {
    // Flags that cannot go together are refused before any file is read.
    if (options.store !== undefined) {
      if (typeof options.stateDir === 'string')
        throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
          source: '--state-dir',
          reason: 'not with --store: the state lives in the shared store',
        });
      if (options.kubernetes)
        throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
          source: '--store',
          reason: 'not with --kubernetes: there the API server holds the config',
        });
    }
    if (options.adminTokenFile) adminToken = await readAdminToken(options.adminTokenFile);
    // So is the kubeconfig, before a state directory or a CA is made for a start that fails.
    if (options.kubernetes && options.kubeconfig !== undefined) {
      const kubeconfig = options.kubeconfig;
      await access(kubeconfig, constants.R_OK).catch((e: Error) => {
        throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
          source: 'kubernetes',
          reason: `kubeconfig ${kubeconfig}: ${e.message}`,
        });
      });
    }
    // Loopback is plaintext, anything else TLS (docs/xds.md, Transport): one rule both sides.
    if (options.servingDns !== undefined && (options.socket || isLoopbackHost(options.host)))
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: '--serving-dns',
        reason: `${options.socket ? '--socket' : `--host ${options.host}`} is plaintext (loopback); TLS is for a non-loopback --host`,
      });
    if (options.servingDns === undefined && !options.socket && !isLoopbackHost(options.host))
      throw new ZmeshError('ZM_ERR_XDS_BIND_REFUSED', { service: 'xDS/CA', host: options.host });
    // Checked before anything starts: a missing directory is the operator's typo, not a watch error.
    if (options.config !== undefined) {
      const source = options.config;
      const info = await stat(source).catch((e: Error) => {
        throw new ZmeshError('ZM_ERR_CONFIG_INVALID', { source, reason: e.message });
      });
      if (!info.isDirectory())
        throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
          source,
          reason: '--config wants a directory of YAML files',
        });
    }
    if (options.store !== undefined) {
      // Loaded only here: the etcd client (gRPC, its protos) is for replicated setups.
      const { EtcdStateStore } = await import('../store/etcd-store.js');
      shared = await EtcdStateStore.open(options.store);
      state = new MemoryStateStore();
    } else if (options.stateDir === undefined && !sqliteAvailable()) {
      // Only the default gives way: a --state-dir that was asked for and cannot be used fails.
      console.error(
        `control plane: state in memory only (a restart forgets applied objects): node:sqlite needs Node 22.5+, this is ${process.version}`,
      );
      state = new MemoryStateStore();
    } else
      state =
        options.stateDir === false
          ? new MemoryStateStore()
          : SqliteStateStore.open(
              typeof options.stateDir === 'string' ? options.stateDir : defaultStateDir(),
            );
  } catch (e) {
    return startFailure('control-plane', e);
  }
  try {
    ca =
      options.caDir !== undefined
        ? await loadOrCreateCa(options.trustDomain, options.caDir)
        : shared
          ? await loadOrCreateCaInShared(options.trustDomain, shared)
          : await loadOrCreateCaInStore(options.trustDomain, state);
    // The waypoint's own decoder: admission refuses what a waypoint would NACK.
    const { decodeWaypointConfig } = await import('@zmesh/waypoint');
    cp = new ControlPlane({
      trustDomain: options.trustDomain,
      state,
      ...(shared ? { shared, tokenKey: await sharedNodeTokenKey(shared) } : {}),
      signCsr: (csr, opts) => ca.signCsr(csr, opts),
      ...(options.maxCertTtl ? { maxCertTtlSeconds: Number(options.maxCertTtl) } : {}),
      ...(options.config ? { configDir: options.config, watch: true } : {}),
      defaultMetrics: true,
      validateWaypointConfig: (config) => {
        const decoded = decodeWaypointConfig(config, 'waypoint');
        return decoded.ok ? [] : decoded.error.map((r) => r.replace(/^waypoint: /, ''));
      },
    });
  } catch (e) {
    state.close();
    await shared?.close();
    return startFailure('control-plane', e);
  }
  cp.addReadinessCheck(caReadiness(ca.rootPem));
  if (options.rootsFile) await writeRootsFile(options.rootsFile, [ca.rootPem]);
  let kube: KubeController | undefined;
  if (options.kubernetes) {
    try {
      kube = await startKubernetes(cp, options, ca.rootPem);
    } catch (e) {
      await cp.stop();
      return startFailure('control-plane', e);
    }
  }
  if (options.socket) await rm(options.socket, { force: true });
  let port: number;
  let admin: AdminServer;
  let serving: ServingCredentials | undefined;
  const listen: AdminListen =
    options.adminPort === undefined
      ? { socket: options.adminSocket ?? defaultAdminSocket() }
      : {
          host: isLoopbackHost(options.host) ? options.host : '127.0.0.1',
          port: Number(options.adminPort),
          token: adminToken,
        };
  try {
    if (options.servingDns !== undefined)
      serving = await ServingCredentials.start(ca, {
        dnsNames: options.servingDns
          .split(',')
          .map((d) => d.trim())
          .filter((d) => d !== ''),
        // 0.0.0.0 / :: name no one address: the DNS names alone are certified then.
        ips: isIP(options.host) !== 0 && !/^(0\.0\.0\.0|::)$/.test(options.host) ? [options.host] : [],
      });
    if (serving) {
      const creds = serving;
      // Renewal failing for a whole lifetime leaves nothing proxies can verify: not ready then.
      cp.addReadinessCheck(() =>
        creds.notAfter.getTime() <= Date.now()
          ? `serving certificate expired at ${creds.notAfter.toISOString()}`
          : undefined,
      );
    }
    port = await cp.start(
      Number(options.port),
      options.socket ? `unix:${options.socket}` : options.host,
      serving,
    );
    if (options.socket) await chmod(options.socket, 0o600);
    admin = await startAdminServer(cp, listen);
  } catch (e) {
    // The xDS server may be up when the admin port is taken: close it before saying why.
    serving?.close();
    await kube?.stop();
    await cp.stop();
    return startFailure('control-plane', e);
  }
  const where = options.socket
    ? `unix:${options.socket}`
    : `${options.host}:${port} (${serving ? `TLS for ${options.servingDns}` : 'plaintext, loopback'})`;
  console.error(
    `control plane: xDS and CA on ${where}, admin on ${admin.port === 0 ? `unix:${admin.address}` : `${'host' in listen ? listen.host : ''}:${admin.port}`}` +
      `, state in ${shared?.location ?? state.location}` +
      (options.rootsFile ? `, roots in ${options.rootsFile}` : ''),
  );
  const stop = async () => {
    serving?.close();
    await kube?.stop();
    await admin.close();
    await cp.stop();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  return 0;
}

/**
 * Controller mode: lists and watches the API (the first config is committed before xDS
 * serves), then elects. Loaded only with --kubernetes, so the YAML mode never loads the client.
 */
async function startKubernetes(
  cp: ControlPlane,
  options: ControlPlaneCommandOptions,
  rootsPem: string,
): Promise<KubeController> {
  const { KubeController } = await import('../kubernetes/kube-controller.js');
  const namespace = options.podNamespace ?? process.env.POD_NAMESPACE ?? 'zmesh-system';
  const fail = (reason: string) => new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: 'kubernetes', reason });
  if (options.kubeconfig === undefined && !process.env.KUBERNETES_SERVICE_HOST)
    throw fail('not running in a cluster (KUBERNETES_SERVICE_HOST unset): pass --kubeconfig FILE');
  let controller: KubeController;
  try {
    controller = new KubeController(cp, {
      ...(options.kubeconfig === undefined ? {} : { kubeconfig: options.kubeconfig }),
      identity: options.podName ?? process.env.POD_NAME ?? hostname(),
      namespace,
      leaseSeconds: Number(options.leaseDuration ?? '15'),
      ...(options.nodeServiceAccounts === undefined
        ? {}
        : { nodeServiceAccounts: nodeServiceAccounts(options.nodeServiceAccounts) }),
      waypoint: {
        image: options.waypointImage ?? `localhost/zmesh:${BUILD_INFO.version}`,
        xds: `zmesh-control-plane.${namespace}.svc:${options.port}`,
        trustDomain: options.trustDomain,
        tokenAudience: options.tokenAudience ?? 'zmesh',
        rootsPem,
      },
    });
  } catch (e) {
    if (e instanceof ZmeshError) throw e;
    throw fail(`kubeconfig ${options.kubeconfig ?? '(in-cluster)'}: ${(e as Error).message}`);
  }
  try {
    await controller.start();
  } catch (e) {
    throw fail((e as Error).message);
  }
  return controller;
}

/** `ns/name,ns/name` → the list; anything else is refused with the reason. */
function nodeServiceAccounts(text: string): string[] {
  const list = text.split(',').map((a) => a.trim());
  for (const a of list)
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?\/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/.test(a))
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: '--node-service-accounts',
        reason: `${JSON.stringify(a)} is not namespace/name`,
      });
  return list;
}
