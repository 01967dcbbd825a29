export { CATALOGUE, type CatalogueEntry, type ErrorCode } from './catalogue.js';
export { startFailure } from './start-failure.js';
export {
  isZmeshError,
  RESPONSE_FLAGS,
  type ResponseFlag,
  responseFlagOf,
  ZmeshError,
} from './zmesh-error.js';
