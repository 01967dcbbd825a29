export * from './bypass/index.js';
export * from './cluster/index.js';
export {
  LocalMesh,
  type MeshOptions,
  type MeshService,
  type MeshSpec,
  VIP_PREFIX,
} from './mesh/local-mesh.js';
export { netnsHttp } from './mesh/netns-http.js';
export { PEER_SERVER, parseRateResult, RATE_CLIENT, type RateResult } from './mesh/pod-programs.js';
