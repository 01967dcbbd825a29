import type { AccessLogInputs, AccessLogPolicy, TrustBundle } from '@zmesh/shared';
import type { Registry } from 'prom-client';
import type { BpfCapture } from './capture/bpf-capture.js';
import type { AppConnector } from './forward/app-connector.js';
import type { CertificateSigner } from './identity/cert-manager.js';
import type { PersistedKeys } from './identity/persisted-keys.js';
import type { PassthroughPolicy } from './outbound/outbound-handler.js';
import type { TenancyOptions } from './outbound/tenant-admission.js';

/** What a Ztunnel is built from (ztunnel.ts): its node, trust, signer, mode and bounds. */

export interface ZtunnelOptions {
  node: string;
  /** ztunnel's own address: admin, metrics and health listen here (127.0.0.N in explicit mode). */
  address: string;
  ports?: { admin: number; metrics: number; ready: number };
  bundle: TrustBundle;
  signer: CertificateSigner;
  certTtlSeconds?: number;
  /** Retry bounds for failed certificate requests (CA unreachable). */
  certBackoff?: { initialMs: number; maxMs: number };
  /** `--persist-keys`: a kept credential is used before asking the CA; each new one is kept. */
  persistedKeys?: PersistedKeys;
  passthrough?: PassthroughPolicy;
  connectApp?: AppConnector;
  pool?: { maxStreamsPerConnection?: number; idleTimeoutMs?: number };
  /** Set false in tests that run several proxies in one process. */
  defaultMetrics?: boolean;
  /**
   * Capture mode (docs/design.md §6): pods are enrolled by the node agent over Istio's ZDS
   * (docs/zds.md; `zdsSocket` is the agent's socket, `cgroupRoot` where kubelet's pod cgroups are), their traffic
   * redirected by BPF, and ztunnel's listeners live inside each pod's network namespace.
   * Without it, explicit-proxy mode (docs/design.md §11).
   */
  capture?: { bpf: BpfCapture; zdsSocket: string; cgroupRoot: string; external?: boolean };
  /**
   * A worker thread (`--workers N`, src/workers/): the workloads this one serves. In capture
   * mode its pods arrive through `enrolment()` (the main thread holds the ZDS connection,
   * `capture.external`); in explicit-proxy mode the main thread names the workloads here.
   */
  serves?: (uid: string) => boolean;
  /** A registry shared with components made before the proxy (the BPF loader's metrics). */
  registry?: Registry;
  /** Tenant isolation (docs/design.md §7); on by default. */
  tenancy?: TenancyOptions;
  /** One line per closed or refused connection (default: on for every namespace, 100 lines/s). */
  accessLog?: AccessLogPolicy;
  /** Where access-log lines go (tests); default the batched access logger. */
  accessLogSink?: AccessLogInputs['sink'];
  /** Bounds on connections to the HBONE ports before they authenticate (docs/hardening.md). */
  inboundLimits?: InboundLimits;
}

export interface InboundLimits {
  /** Unauthenticated connections one source address may hold (default 64). */
  maxPreauthPerSource?: number;
  /** Unauthenticated connections in total, all pods of the node together (default 1024). */
  maxPreauth?: number;
  /** TLS + HTTP/2 preface + first SETTINGS deadline (default 10 s). */
  handshakeTimeoutMs?: number;
  /** Inbound sessions are PINGed this often and closed when one goes unanswered for twice it (default 10 s). */
  pingIntervalMs?: number;
  /** fds kept free: new inbound connections are refused below it (default 256; 0 turns it off). */
  fdReserve?: number;
}
