export * from './cluster/index.js';
