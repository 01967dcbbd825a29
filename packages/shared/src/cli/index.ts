/**
 * `@zmesh/shared/cli`: what a command's parser needs, without the data path (gRPC, pino,
 * prom-client, protobufjs) that the package's main entry loads: a usage error costs a
 * Node start, not the whole mesh.
 */
export { FieldReader } from '../config/field-reader.js';
export { isZmeshError, ZmeshError } from '../errors/index.js';
export * from '../net/admin-client.js';
export { err, ok, type Result } from '../result.js';
export { BUILD_INFO, versionLine } from '../runtime/build-info.js';
export * from './discipline.js';
