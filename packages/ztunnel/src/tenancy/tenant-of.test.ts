import test from 'ava';
import { CONTROL_TENANT, TENANT_LABEL, tenantOf } from './tenant-of.js';

test('tenant is the namespace by default', (t) => {
  t.is(tenantOf({ namespace: 'shop' }), 'shop');
  t.is(tenantOf({ namespace: 'shop', labels: { app: 'cart' } }), 'shop');
});

test('the zmesh.io/tenant label overrides the namespace', (t) => {
  t.is(tenantOf({ namespace: 'shop', labels: { [TENANT_LABEL]: 'acme' } }), 'acme');
});

test('a malformed or reserved label falls back to the namespace', (t) => {
  for (const bad of ['', 'has space', 'x'.repeat(64), '-lead', CONTROL_TENANT]) {
    t.is(tenantOf({ namespace: 'shop', labels: { [TENANT_LABEL]: bad } }), 'shop', bad);
  }
});
