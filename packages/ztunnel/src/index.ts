export * from './tenancy/index.js';
