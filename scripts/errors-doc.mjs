// Regenerates docs/errors.md from the catalogue (run after `tsc -b`); errors.test.ts
// fails when the two differ, so a new code cannot land undocumented.
import { writeFileSync } from 'node:fs';
import { CATALOGUE } from '../packages/shared/dist/errors/catalogue.js';

const rows = Object.entries(CATALOGUE).map(
  ([code, e]) => `| ${code} | ${e.status} | ${e.flag} | ${e.message} |`,
);
writeFileSync(
  new URL('../docs/errors.md', import.meta.url),
  `# Error catalogue

Every error that crosses a module boundary is a \`ZmeshError\` with one of these stable codes.
A code never changes meaning. The status is what a CONNECT or an HTTP request ends with; the
flag is the bounded \`response_flags\` metric label. Generated from
\`packages/shared/src/errors/catalogue.ts\` by \`node scripts/errors-doc.mjs\`; errors.test.ts
keeps the two in step.

| code | status | flag | message |
| --- | --- | --- | --- |
${rows.join('\n')}
`,
);
