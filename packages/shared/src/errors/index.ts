export {
  CATALOGUE,
  type CatalogueEntry,
  type ErrorCode,
  RESPONSE_FLAGS,
  type ResponseFlag,
} from './catalogue.js';
export { startFailure } from './start-failure.js';
export { isZmeshError, responseFlagOf, ZmeshError } from './zmesh-error.js';
