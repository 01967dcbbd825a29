export { CATALOGUE, type CatalogueEntry, type ErrorCode } from './catalogue.js';
export {
  isZmeshError,
  RESPONSE_FLAGS,
  type ResponseFlag,
  responseFlagOf,
  ZmeshError,
} from './zmesh-error.js';
