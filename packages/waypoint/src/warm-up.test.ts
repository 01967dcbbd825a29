import { CertificateAuthority, TrustBundle } from '@zmesh/shared';
import test from 'ava';
import { parseWaypointConfig } from './config/config-parser.js';
import { warmUp } from './warm-up.js';

/*
 * The start-up warm-up runs real requests through a private waypoint and leaves nothing
 * behind: no listener, no socket, no metric in the real registry. A warm-up that cannot
 * finish reports why and still cleans up; it never throws into start-up.
 */

async function setup() {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const config = parseWaypointConfig('waypoint: { name: wp, namespace: shop }', 'test');
  if (!config.ok) throw new Error(config.error.join());
  return {
    credential: await ca.issue('spiffe://cluster.local/ns/shop/sa/wp', 600),
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
    config: config.value,
  };
}

const tcpHandles = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP')).length;

async function settled(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

test.serial('the warm-up answers every request through the waypoint and closes what it opened', async (t) => {
  const opts = await setup();
  const before = tcpHandles();
  const r = await warmUp({ ...opts, requests: 300 });
  t.is(r.error, undefined);
  t.is(r.requests, 300);
  await settled();
  t.is(tcpHandles(), before, 'no listener or socket left open');
});

test.serial('a warm-up cut short by its deadline says so, cleans up and does not throw', async (t) => {
  const opts = await setup();
  const before = tcpHandles();
  const r = await warmUp({ ...opts, requests: 1_000_000, timeoutMs: 300 });
  t.is(r.error, 'timed out');
  t.true(r.requests < 1_000_000);
  await settled();
  t.is(tcpHandles(), before);
});

test.serial(
  'a waypoint whose certificate does not match its config gets an error back, not a throw',
  async (t) => {
    const opts = await setup();
    const other = parseWaypointConfig('waypoint: { name: other, namespace: elsewhere }', 'test');
    if (!other.ok) return t.fail(other.error.join());
    const r = await warmUp({ ...opts, config: other.value, requests: 10 });
    t.truthy(r.error);
    t.is(r.requests, 0);
  },
);
