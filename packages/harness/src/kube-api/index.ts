export {
  ApiServerDouble,
  type ApiServerDoubleOptions,
  type KubeObject,
  type RequestRecord,
} from './api-server-double.js';
export { apiVersionOf, DEFAULT_RESOURCES, type ResourceType, typeKey } from './resources.js';
export { parseFieldSelector, parseLabelSelector } from './selectors.js';
