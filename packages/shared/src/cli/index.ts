export * from './discipline.js';
