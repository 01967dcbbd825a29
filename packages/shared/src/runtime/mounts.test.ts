import test from 'ava';
import { cgroup2MountOf, readMounts } from './mounts.js';

const HYBRID = [
  'sysfs /sys sysfs rw,nosuid 0 0',
  'tmpfs /sys/fs/cgroup tmpfs ro,nosuid 0 0',
  'cgroup2 /sys/fs/cgroup/uni\\040fied cgroup2 rw,nsdelegate 0 0',
  'cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0',
  '',
  'garbage',
].join('\n');

test('parses each line, undoing the \\040 escape of spaces', (t) => {
  const m = readMounts(HYBRID);
  t.is(m.length, 4, 'the blank and the one-field lines are skipped');
  t.deepEqual(m[3], { dir: '/sys/fs/cgroup/cpu,cpuacct', type: 'cgroup', options: ['rw', 'cpu', 'cpuacct'] });
  t.is(cgroup2MountOf(m), '/sys/fs/cgroup/uni fied');
});

test('no cgroup2 mount: undefined, for the caller to default or refuse', (t) => {
  t.is(cgroup2MountOf(readMounts('proc /proc proc rw 0 0')), undefined);
  t.is(cgroup2MountOf(readMounts('')), undefined);
});
