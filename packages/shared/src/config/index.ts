export { FieldReader } from './field-reader.js';
