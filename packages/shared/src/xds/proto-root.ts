import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

/**
 * The .proto files are not compiled by tsc: they stay in `src/xds/proto/` and are found
 * relative to the package root, so the same path works from `src/` and from `dist/`.
 * google/protobuf/* come from protobufjs's bundled copies.
 */
export const PROTO_DIR = fileURLToPath(new URL('../../src/xds/proto/', import.meta.url));

const FILES = [
  'istio/workload/workload.proto',
  'istio/security/authorization.proto',
  'istio/ca/ca.proto',
  'envoy/service/discovery/v3/discovery.proto',
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

export const TYPE_URL_PREFIX = 'type.googleapis.com/';
export const ADDRESS_TYPE_URL = 'type.googleapis.com/istio.workload.Address';
export const AUTHORIZATION_TYPE_URL = 'type.googleapis.com/istio.security.Authorization';
