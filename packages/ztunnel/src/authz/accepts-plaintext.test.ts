import { staticStrictPolicy, type Workload } from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { InboundAuthorizer } from './inbound-authorizer.js';

const STRICT_KEY = 'istio-system/istio_converted_static_strict';
const workload = (authorizationPolicies: string[]) =>
  ({ uid: 'w', namespace: 'ns', authorizationPolicies }) as unknown as Workload;

test('plaintext only where the control plane serves PeerAuthentication and the workload is not STRICT on every port', (t) => {
  const authz = new InboundAuthorizer(new Registry(), () => undefined);
  t.false(authz.acceptsPlaintext(workload([])), 'no word from the control plane (local config): STRICT');
  t.true(authz.replacePolicies([staticStrictPolicy('istio-system')]).ok);
  t.false(authz.acceptsPlaintext(workload([STRICT_KEY])), 'names the static STRICT policy');
  t.true(authz.acceptsPlaintext(workload([])), 'PERMISSIVE');
  t.true(
    authz.acceptsPlaintext(workload(['ns/converted_peer_authentication_x'])),
    'mixed ports: ztunnel decides per port',
  );
});

test('the static STRICT policy refuses a peer without identity and admits one with it', (t) => {
  const authz = new InboundAuthorizer(new Registry(), () => undefined);
  t.true(authz.replacePolicies([staticStrictPolicy('istio-system')]).ok);
  const w = workload([STRICT_KEY]);
  const conn = { sourceIp: '10.0.0.9', destinationIp: '10.0.0.1', destinationPort: 8080 };
  t.is(authz.check(w, { ...conn, sourcePrincipal: '' })?.code, 'ZM_ERR_AUTHZ_DENIED');
  t.is(authz.check(w, { ...conn, sourcePrincipal: 'spiffe://cluster.local/ns/a/sa/b' }), undefined);
});
