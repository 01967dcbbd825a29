import protobuf from 'protobufjs';
import { checkoutPath } from '../runtime/checkout.js';

/**
 * The .proto files are not compiled by tsc: they stay in `src/xds/proto/` and are found
 * from the checkout root, so the same path works from `dist/` and from the proxies' bundle.
 * google/protobuf/* come from protobufjs's bundled copies.
 */
export const PROTO_DIR = `${checkoutPath('packages', 'shared', 'src', 'xds', 'proto')}/`;

const FILES = [
  'istio/workload/workload.proto',
  'istio/security/authorization.proto',
  'istio/ca/ca.proto',
  'envoy/service/discovery/v3/discovery.proto',
  'istio/zds/zds.proto',
];

let root: protobuf.Root | undefined;

export function protoRoot(): protobuf.Root {
  if (root === undefined) {
    const r = new protobuf.Root();
    r.resolvePath = (_origin, target) =>
      target.startsWith('google/protobuf/') ? target : PROTO_DIR + target;
    r.loadSync(FILES, { keepCase: false });
    r.resolveAll();
    root = r;
  }
  return root;
}

export function protoType(name: string): protobuf.Type {
  return protoRoot().lookupType(name);
}

export const ADDRESS_TYPE_URL = 'type.googleapis.com/istio.workload.Address';
export const AUTHORIZATION_TYPE_URL = 'type.googleapis.com/istio.security.Authorization';
