import type { V1Pod } from '@kubernetes/client-node';

/** Istio's label: `ambient` enrolls a Namespace's pods or one Pod; `none` on a Pod keeps it out. */
const DATAPLANE_MODE = 'istio.io/dataplane-mode';
/** Set on a waypoint's own pods: a waypoint is never an enrolled pod (its traffic is HBONE already). */
const GATEWAY_NAME = 'gateway.networking.k8s.io/gateway-name';

/**
 * Whether the node agent enrolls a pod, as Istio's node agent decides it: the Pod's
 * `istio.io/dataplane-mode` wins (`none` keeps it out, `ambient` brings it in), else its
 * Namespace's; never a host-network pod, a waypoint's pod, or one that has finished. A terminating
 * pod stays enrolled until it is gone, so that its last connections still drain through ztunnel.
 */
export function wantsCapture(pod: V1Pod, namespaceLabels: Record<string, string> | undefined): boolean {
  const labels = pod.metadata?.labels ?? {};
  if (pod.spec?.hostNetwork === true || labels[GATEWAY_NAME] !== undefined) return false;
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return false;
  const mode = labels[DATAPLANE_MODE] ?? namespaceLabels?.[DATAPLANE_MODE];
  return mode === 'ambient';
}
