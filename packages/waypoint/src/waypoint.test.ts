import { CertificateAuthority, TrustBundle } from '@zmesh/shared';
import test from 'ava';
import { parseWaypointConfig } from './config/config-parser.js';
import { baggageWorkload } from './http/request-record.js';
import { Waypoint } from './waypoint.js';

test('applyConfig swaps a valid config and keeps the active one on invalid input', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const first = parseWaypointConfig('waypoint: { name: wp, namespace: ns }', 'a');
  if (!first.ok) return t.fail(first.error.join());
  const w = new Waypoint({
    credential: await ca.issue('spiffe://cluster.local/ns/ns/sa/wp', 600),
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
    config: first.value,
    host: '127.67.0.1',
  });
  const bad = w.applyConfig(
    { waypoint: { name: 'wp', namespace: 'ns' }, httpRoutes: [{ parentRefs: [{ name: 'x' }] }] },
    'xds',
  );
  t.false(bad.ok);
  t.is(w.config, first.value, 'unchanged');
  const good = w.applyConfig(
    {
      waypoint: { name: 'wp', namespace: 'ns' },
      services: [{ name: 's', namespace: 'ns', addresses: ['10.0.0.1'], ports: [{ servicePort: 80 }] }],
    },
    'xds',
  );
  t.true(good.ok);
  t.is(w.config.services.length, 1);
  const text = await w.metrics.registry.metrics();
  t.regex(text, /zmesh_waypoint_config_total\{result="rejected"\} 1/);
  t.regex(text, /zmesh_waypoint_config_total\{result="applied"\} 1/);
  await w.stop();
});

test('the source workload label comes from baggage only for the peer identity’s own namespace', (t) => {
  const peer = 'spiffe://cluster.local/ns/front/sa/frontend';
  const bag = (ns: string) => ({ 'k8s.namespace.name': ns, 'k8s.workload.name': 'frontend' });
  t.is(baggageWorkload(peer, bag('front')), 'frontend');
  t.is(baggageWorkload(peer, bag('shop')), undefined, 'a name claimed for another namespace');
  t.is(baggageWorkload(peer, undefined), undefined);
  t.is(
    baggageWorkload('spiffe://cluster.local/custom/path', bag('front')),
    undefined,
    'no namespace in the ID',
  );
});
