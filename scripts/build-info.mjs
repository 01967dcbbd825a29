// Writes the build's identity into packages/shared/dist/runtime/build-info.js (after tsc,
// before the bundles, so they carry it inline): the root package.json's version, the git
// commit (`-dirty` with uncommitted changes, `unknown` outside a git checkout) and the build
// time (SOURCE_DATE_EPOCH when set, for reproducible images). `zmesh version` prints it.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const { version } = JSON.parse(readFileSync('package.json', 'utf8'));
const git = (...args) => {
  try {
    return execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
};
const head = git('rev-parse', 'HEAD');
const dirty = head !== undefined && git('status', '--porcelain', '--untracked-files=no') !== '';
const commit = head === undefined ? 'unknown' : `${head}${dirty ? '-dirty' : ''}`;
const epoch = process.env.SOURCE_DATE_EPOCH;
const builtAt = new Date(epoch ? Number(epoch) * 1000 : Date.now()).toISOString().replace(/\.\d{3}Z$/, 'Z');
const target = 'packages/shared/dist/runtime/build-info.js';
const compiled = readFileSync(target, 'utf8');
const placeholder = /export const BUILD_INFO = \{[^}]*\};/;
if (!placeholder.test(compiled)) throw new Error(`${target}: BUILD_INFO placeholder not found`);
writeFileSync(
  target,
  compiled.replace(placeholder, `export const BUILD_INFO = ${JSON.stringify({ version, commit, builtAt })};`),
);
