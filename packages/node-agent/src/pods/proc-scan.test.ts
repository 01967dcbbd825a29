import test from 'ava';
import { wantsCapture } from './pod-policy.js';
import { podUidOfCgroup } from './proc-scan.js';

const UID = '6f1c2a9e-5b1d-4c1e-9a43-0c9d2b7c1e11';

test("a process's cgroup names its pod's uid in kubelet's layouts, and nothing else does", (t) => {
  // cgroupfs driver, per QoS class, the pod's own cgroup or a container's under it.
  t.is(podUidOfCgroup(`/kubepods/pod${UID}`), UID);
  t.is(podUidOfCgroup(`/kubepods/burstable/pod${UID}/0123abcd`), UID);
  t.is(podUidOfCgroup(`/zm-1a2b3c/kubepods/besteffort/pod${UID}`), UID);
  // systemd driver: the uid's dashes written as underscores.
  const u = UID.replaceAll('-', '_');
  t.is(podUidOfCgroup(`/kubepods.slice/kubepods-pod${u}.slice`), UID);
  t.is(
    podUidOfCgroup(
      `/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${u}.slice/cri-containerd-ab.scope`,
    ),
    UID,
  );
  // Not a pod: the node's own services, a pod-looking name elsewhere, a bad uid.
  t.is(podUidOfCgroup('/system.slice/kubelet.service'), undefined);
  t.is(podUidOfCgroup(`/user.slice/pod${UID}`), undefined);
  t.is(podUidOfCgroup('/kubepods/burstable/pod'), undefined);
  t.is(podUidOfCgroup('/kubepods/besteffort/pod../x'), undefined);
  t.is(podUidOfCgroup('/kubepods/besteffort/pod$(reboot)'), undefined);
});

test("which pods are enrolled: the pod's dataplane-mode wins over its namespace's", (t) => {
  const pod = (labels: Record<string, string> = {}, extra: object = {}) => ({
    metadata: { name: 'p', namespace: 'shop', uid: UID, labels },
    spec: { containers: [], ...extra },
    status: { phase: 'Running' },
  });
  const ambient = { 'istio.io/dataplane-mode': 'ambient' };
  t.true(wantsCapture(pod(), ambient));
  t.false(wantsCapture(pod(), {}));
  t.false(wantsCapture(pod(), undefined));
  t.true(wantsCapture(pod(ambient), {}));
  t.false(wantsCapture(pod({ 'istio.io/dataplane-mode': 'none' }), ambient));
  t.false(wantsCapture(pod({}, { hostNetwork: true }), ambient), 'host-network pods never');
  t.false(
    wantsCapture(pod({ 'gateway.networking.k8s.io/gateway-name': 'waypoint' }), ambient),
    'waypoints never',
  );
  t.false(wantsCapture({ ...pod(), status: { phase: 'Succeeded' } }, ambient), 'finished pods leave');
});
