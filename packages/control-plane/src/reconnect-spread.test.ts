import test from 'ava';
import { NodeTokens } from './node-tokens.js';
import {
  configDir,
  NAMESPACE_YAML,
  newClient,
  podYaml,
  removeDir,
  startControlPlane,
  TOKEN_KEY,
  until,
} from './testing/fixtures.js';

/**
 * docs/design.md §8: after an outage, proxies reconnect with jittered backoff, so a recovering
 * control plane is not hit by every proxy in the same instant. Real clients, a real server
 * stopped and started again on the same port; the reconnect instants must be spread.
 */
const CLIENTS = 12;

test('N clients reconnecting after an outage are spread over the backoff window, not synchronized', async (t) => {
  const dir = await configDir({ 'a.yaml': `${NAMESPACE_YAML}---\n${podYaml('a', '10.1.0.1')}` });
  t.teardown(() => removeDir(dir));
  let { cp, port } = await startControlPlane(dir);
  const token = new NodeTokens(TOKEN_KEY).issueNodeToken('node-1');
  const clients = Array.from({ length: CLIENTS }, () =>
    newClient(port, token, { backoff: { initialMs: 50, maxMs: 400 } }),
  );
  t.teardown(async () => {
    for (const c of clients) await c.stop();
    await cp.stop();
  });
  for (const c of clients) await c.start();
  await until(() => clients.every((c) => c.synced), 5000);
  await cp.stop();
  await until(() => clients.every((c) => !c.connected), 5000);
  // Long enough for every client's backoff to reach its cap (50 → 400 ms in four failures).
  await new Promise((r) => setTimeout(r, 1500));
  const back: number[] = [];
  for (const c of clients) c.once('connected', () => back.push(Date.now()));
  const restarted = Date.now();
  ({ cp } = await startControlPlane(dir, {}, port));
  await until(() => back.length === CLIENTS, 5000);
  const delays = back.map((b) => b - restarted).sort((a, b) => a - b);
  const spread = delays.at(-1)! - delays[0]!;
  t.log(`reconnect delays (ms): ${delays.join(' ')}`);
  t.true(spread >= 100, `reconnects spread over ${spread} ms`);
  const sameInstant = Math.max(...delays.map((d) => delays.filter((x) => Math.abs(x - d) <= 10).length));
  t.true(
    sameInstant <= CLIENTS / 2,
    `at most half reconnect within 10 ms of each other (saw ${sameInstant})`,
  );
});
