import test from 'ava';
import { autoWorkers, type CpuFacts, cgroupCpuLimit } from './worker-count.js';

const V2_MOUNTS = 'cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n';
const V1_MOUNTS =
  'tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\ncgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n';

function facts(files: Record<string, string>, over: Partial<CpuFacts> = {}): CpuFacts {
  return {
    parallelism: 8,
    cgroups: '0::/kubepods/pod1/ztunnel\n',
    mounts: V2_MOUNTS,
    read: (p) => files[p],
    ...over,
  };
}

test('auto is the CPUs the process may run on, at most 4, without a quota', (t) => {
  t.is(autoWorkers(facts({ '/sys/fs/cgroup/kubepods/pod1/ztunnel/cpu.max': 'max 100000\n' })).workers, 4);
  t.is(autoWorkers(facts({}, { parallelism: 2 })).workers, 2);
  t.is(autoWorkers(facts({}, { parallelism: 1 })).workers, 1);
});

test('a cgroup v2 quota anywhere up the tree caps it, rounded up to whole CPUs', (t) => {
  const f = facts({
    '/sys/fs/cgroup/kubepods/pod1/ztunnel/cpu.max': 'max 100000\n',
    '/sys/fs/cgroup/kubepods/pod1/cpu.max': '150000 100000\n',
    '/sys/fs/cgroup/kubepods/cpu.max': '800000 100000\n',
  });
  t.is(cgroupCpuLimit(f), 2);
  t.deepEqual(autoWorkers(f), { workers: 2, parallelism: 8, cpuQuota: 2 });
  t.is(autoWorkers(facts({ '/sys/fs/cgroup/cpu.max': '50000 100000' })).workers, 1, 'half a CPU: one loop');
});

test('cgroup v1 cfs quota is read from the hierarchy that holds cpu; -1 is no quota', (t) => {
  const v1 = (quota: string) =>
    facts(
      {
        '/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us': `${quota}\n`,
        '/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us': '100000\n',
      },
      { mounts: V1_MOUNTS, cgroups: '5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n' },
    );
  t.is(cgroupCpuLimit(v1('300000')), 3);
  t.is(cgroupCpuLimit(v1('-1')), undefined);
  t.is(autoWorkers(v1('300000')).workers, 3);
});

test('unreadable or garbage cgroup files are no quota, never an error', (t) => {
  t.is(cgroupCpuLimit(facts({ '/sys/fs/cgroup/kubepods/pod1/ztunnel/cpu.max': 'junk' })), undefined);
  t.is(cgroupCpuLimit(facts({}, { cgroups: 'not a cgroup file', mounts: '' })), undefined);
  t.is(cgroupCpuLimit(facts({ '/sys/fs/cgroup/cpu.max': '0 100000' })), undefined);
});

test('this machine: a choice between 1 and 4', (t) => {
  const { workers } = autoWorkers();
  t.true(workers >= 1 && workers <= 4, String(workers));
});
