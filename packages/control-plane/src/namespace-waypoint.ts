import { ADDRESS_TYPE_URL, err, ok, type Result, WAYPOINT_CONFIG_TYPE_URL } from '@zmesh/shared';
import { USE_WAYPOINT_LABEL } from './compiler.js';
import type { ConfigStore, StoreUnavailable } from './config-store.js';
import type { NamespaceObject } from './k8s-objects.js';
import type { ProxyReport } from './proxy-status.js';

/** Istio's default waypoint name (`istioctl waypoint apply` without --name). */
export const DEFAULT_WAYPOINT_NAME = 'waypoint';
/** How long `ns l7` waits for every connected proxy when the caller gives no timeout. */
export const DEFAULT_ACK_TIMEOUT_MS = 10_000;
const POLL_MS = 20;

export interface RolloutReport {
  namespace: string;
  waypoint: string | null;
  /** Address-type version that carries the change. */
  version: number;
  acked: string[];
  notAcked: Array<{ proxy: string; node: string; state: string; reason?: string }>;
}

/**
 * Sets (`waypoint` given) or removes the namespace's `istio.io/use-waypoint` label. The
 * label lands on the applied copy of the Namespace, keeping its other labels; the compiler
 * then points every service and workload of the namespace at the waypoint.
 */
export async function setNamespaceWaypoint(
  store: ConfigStore,
  namespace: string,
  waypoint: string | undefined,
): Promise<Result<number> | StoreUnavailable> {
  const current = store.view().objects.get(`Namespace//${namespace}`) as NamespaceObject | undefined;
  if (current === undefined) return err([`namespace ${namespace} is not in the config`]);
  const labels = { ...current.metadata.labels };
  if (waypoint === undefined) delete labels[USE_WAYPOINT_LABEL];
  else labels[USE_WAYPOINT_LABEL] = waypoint;
  const applied = await store.submit({
    apply: [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace, labels } }],
    source: `ns l7 ${namespace}`,
  });
  return applied.ok ? ok(applied.value.generation) : applied;
}

/**
 * Waits until every connected proxy has ACKed `version` of the Address type (or holds every
 * resource current, which a proxy that NACKed an unrelated resource still can), or until
 * `timeoutMs`; then reports which did and which did not, with their state and NACK reason.
 * A waypoint (subscribed to its config, not to Addresses) is waited for on its config type,
 * at `waypointVersion` when given.
 */
export async function waitForAcks(
  proxyStatus: () => ProxyReport[],
  version: number,
  timeoutMs: number,
  waypointVersion?: number,
): Promise<Pick<RolloutReport, 'acked' | 'notAcked'>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const split = splitByAck(proxyStatus(), version, waypointVersion ?? 0);
    if (split.notAcked.length === 0 || Date.now() >= deadline) return split;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

function splitByAck(
  reports: ProxyReport[],
  addressVersion: number,
  waypointVersion: number,
): Pick<RolloutReport, 'acked' | 'notAcked'> {
  const acked: string[] = [];
  const notAcked: RolloutReport['notAcked'] = [];
  for (const p of reports.filter((r) => r.connected)) {
    const waypoint =
      p.types[ADDRESS_TYPE_URL] === undefined && p.types[WAYPOINT_CONFIG_TYPE_URL] !== undefined;
    const t = p.types[waypoint ? WAYPOINT_CONFIG_TYPE_URL : ADDRESS_TYPE_URL];
    const version = waypoint ? waypointVersion : addressVersion;
    if (t && ((t.acked ?? -1) >= version || t.state === 'SYNCED')) acked.push(p.proxy);
    else
      notAcked.push({
        proxy: p.proxy,
        node: p.node,
        state: t?.state ?? 'NOT_SUBSCRIBED',
        ...(t?.nacked ? { reason: t.nacked.reason } : {}),
      });
  }
  return { acked, notAcked };
}
