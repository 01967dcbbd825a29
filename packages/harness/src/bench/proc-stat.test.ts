import { spawn } from 'node:child_process';
import test from 'ava';
import {
  cpuSeconds,
  largestResidentSet,
  processCpuSecondsSync,
  residentSet,
  residentSetSync,
} from './proc-stat.js';

test("a process's resident set splits into anonymous and file-backed pages", async (t) => {
  const own = await residentSet(process.pid);
  t.true(own.anon > 1 << 20, `anonymous ${own.anon}`);
  // Node's executable is mapped from a file.
  t.true(own.file > 1 << 20, `file-backed ${own.file}`);
  // VmRSS is RssAnon + RssFile + RssShmem, each read from the same status file.
  t.true(own.rss >= own.anon + own.file, `${own.rss} < ${own.anon} + ${own.file}`);
});

test('the largest of several processes is picked by RSS, and a process that has gone reads zeros', async (t) => {
  // A child that allocates 64 MB and touches it: larger than this test's process.
  const child = spawn(process.execPath, [
    '-e',
    'const b = Buffer.alloc(64 << 20, 1); console.log("ready"); setInterval(() => b[0]++, 1000);',
  ]);
  t.teardown(() => child.kill());
  await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
  const largest = await largestResidentSet([process.pid, child.pid!]);
  // Picked the child: its 64 MB puts it above this process (two reads a moment apart differ by a few pages).
  t.true(largest.rss > (await residentSet(process.pid)).rss);
  t.true(Math.abs(largest.rss - (await residentSet(child.pid!)).rss) < 4 << 20);
  t.true(largest.anon > 64 << 20);
  child.kill();
  await new Promise((r) => child.once('exit', r));
  t.deepEqual(await residentSet(child.pid!), { rss: 0, anon: 0, file: 0 });
  t.deepEqual(residentSetSync(child.pid!), { rss: 0, anon: 0, file: 0 });
  t.is(processCpuSecondsSync(child.pid!), 0);
  t.deepEqual(await largestResidentSet([]), { rss: 0, anon: 0, file: 0 });
});

test('the synchronous readings of one process agree with the tree readings', async (t) => {
  const before = processCpuSecondsSync(process.pid);
  // Burn CPU until the counters move by more than a clock tick: on a loaded machine 300 ms
  // of wall clock gave this process 0.06 s of CPU. The deadline only ends a broken reading.
  const deadline = performance.now() + 10_000;
  let after = before;
  while (after - before < 0.1 && performance.now() < deadline) after = processCpuSecondsSync(process.pid);
  t.true(after - before >= 0.1, `${before} → ${after}`);
  // The tree adds children (live, and reaped ones' times) to the same process's own.
  const own = processCpuSecondsSync(process.pid);
  t.true((await cpuSeconds([process.pid])) >= own - 0.02);
  const sync = residentSetSync(process.pid);
  t.true(sync.anon > 1 << 20 && sync.file > 1 << 20);
});
