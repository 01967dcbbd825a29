export { FieldReader } from './field-reader.js';
export { parseYamlText, readYamlFile } from './yaml-source.js';
