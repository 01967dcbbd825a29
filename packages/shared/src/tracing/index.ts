export { childTraceparent, newTraceparent } from './trace-context.js';
