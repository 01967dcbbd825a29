import { existsSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { PROTO_DIR } from '../xds/proto-root.js';
import { checkoutPath } from './checkout.js';

test('checkout paths start at the directory holding pnpm-workspace.yaml', (t) => {
  t.true(existsSync(checkoutPath('pnpm-workspace.yaml')));
  t.true(existsSync(checkoutPath('packages', 'shared', 'package.json')));
});

test('the .proto files are found from the checkout root', (t) => {
  t.true(PROTO_DIR.endsWith('/packages/shared/src/xds/proto/'));
  t.true(existsSync(join(PROTO_DIR, 'istio', 'workload', 'workload.proto')));
});
