#!/usr/bin/env node
// Rewrites the generated section of docs/performance.md (between <!-- perf:start --> and
// <!-- perf:end -->) from a `zmesh bench --json` file. Usage:
//   node scripts/perf-section.mjs out/bench.json [docs/performance.md]
import { readFile, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { rewritePerfSection } from '../packages/harness/dist/report/perf-markdown.js';

const [json, target = resolve(import.meta.dirname, '../docs/performance.md')] = process.argv.slice(2);
if (!json) {
  console.error('usage: perf-section.mjs <bench.json> [docs/performance.md]');
  process.exit(2);
}
const report = JSON.parse(await readFile(json, 'utf8'));
const text = await readFile(target, 'utf8');
await writeFile(target, rewritePerfSection(text, report, 'zmesh ztunnel pair'));
console.log(`perf-section: rewrote the generated section of ${target} from ${json}`);
