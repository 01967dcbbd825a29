// Passes ava's TAP through and ends with the plain line CI reads:
// "ava: N passed, N failed, N skipped". Skipped tests keep their reason in the TAP.
import { createInterface } from 'node:readline';

const counts = { pass: 0, fail: 0, skip: 0, todo: 0 };
let sawPlan = false;
for await (const line of createInterface({ input: process.stdin })) {
  console.log(line);
  const m = /^# (pass|fail|skip|todo) (\d+)$/.exec(line);
  if (m) counts[m[1]] = Number(m[2]);
  if (/^1\.\.\d+/.test(line)) sawPlan = true;
}
if (!sawPlan) counts.fail += 1;
console.log(`ava: ${counts.pass} passed, ${counts.fail} failed, ${counts.skip + counts.todo} skipped`);
