export { FieldReader } from './field-reader.js';
export {
  checkUnique,
  DEFAULT_TRUST_DOMAIN,
  DNS_LABEL,
  readAddresses,
  readGatewayRef,
  readLabels,
  readPorts,
  readService,
  readWorkload,
} from './model-reader.js';
export { parseYamlText, readYamlFile } from './yaml-source.js';
