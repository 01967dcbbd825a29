export * from './capture/index.js';
