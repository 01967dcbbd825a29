import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ZmeshError } from '@zmesh/shared';
import test from 'ava';
import { cgroupPids, checkPodNetns, findPodCgroup, netnsIdentity } from './pod-cgroup.js';

const UID = '6f1c2a9e-5b1d-4c1e-9a43-0c9d2b7c1e11';

function root(t: { teardown: (f: () => void) => void }, ...dirs: string[]): string {
  const r = mkdtempSync(join(tmpdir(), 'zm-cg-'));
  t.teardown(() => rmSync(r, { recursive: true, force: true }));
  for (const d of dirs) mkdirSync(join(r, d), { recursive: true });
  return r;
}

test('a pod cgroup is found in the cgroupfs and the systemd layouts kubelet uses', (t) => {
  const cgroupfs = root(t, `kubepods/burstable/pod${UID}`);
  t.is(findPodCgroup(cgroupfs, UID), join(cgroupfs, `kubepods/burstable/pod${UID}`));
  const systemd = root(
    t,
    `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${UID.replaceAll('-', '_')}.slice`,
  );
  t.regex(findPodCgroup(systemd, UID), /kubepods-besteffort-pod6f1c2a9e_5b1d_4c1e_9a43_0c9d2b7c1e11\.slice$/);
  const guaranteed = root(t, `kubepods.slice/kubepods-pod${UID.replaceAll('-', '_')}.slice`);
  t.regex(findPodCgroup(guaranteed, UID), /kubepods-pod6f1c.*\.slice$/);
});

test('no cgroup, or two, for a uid is a ZM_ERR_ZDS_WORKLOAD refusal', (t) => {
  const none = root(t, 'kubepods/besteffort/podother');
  const e = t.throws(() => findPodCgroup(none, UID)) as ZmeshError;
  t.is(e.code, 'ZM_ERR_ZDS_WORKLOAD');
  t.regex(e.message, /no kubelet pod cgroup/);
  const two = root(t, `kubepods/pod${UID}`, `kubepods/besteffort/pod${UID}`);
  t.regex((t.throws(() => findPodCgroup(two, UID)) as Error).message, /several pod cgroups/);
});

test('a namespace is recognised by its nsfs file; anything else is refused', (t) => {
  t.regex(netnsIdentity('/proc/self/ns/net'), /^net:\[\d+\]$/);
  t.throws(() => netnsIdentity('/proc/self/status'), { message: /not a namespace file/ });
});

test("the cgroup's processes must be in the passed namespace", (t) => {
  const r = root(t, 'pod/ctr');
  writeFileSync(join(r, 'pod', 'cgroup.procs'), '');
  writeFileSync(join(r, 'pod', 'ctr', 'cgroup.procs'), `${process.pid}\n`);
  t.deepEqual(cgroupPids(join(r, 'pod')), [process.pid], 'containers are child cgroups');
  const mine = netnsIdentity('/proc/self/ns/net');
  t.notThrows(() => checkPodNetns(UID, join(r, 'pod'), mine));
  const e = t.throws(() => checkPodNetns(UID, join(r, 'pod'), 'net:[1]')) as ZmeshError;
  t.is(e.code, 'ZM_ERR_ZDS_WORKLOAD');
  t.notThrows(() => checkPodNetns(UID, root(t), 'net:[1]'), 'an empty cgroup has nothing to disagree with');
});
