// Regenerates docs/errors.md from the catalogue and its causes and remedies (run after
// `tsc -b`); errors.test.ts fails when the two differ, so a new code cannot land undocumented.
import { writeFileSync } from 'node:fs';
import { CATALOGUE } from '../packages/shared/dist/errors/catalogue.js';
import { REMEDIES } from '../packages/shared/dist/errors/remedies.js';

const rows = Object.entries(CATALOGUE).map(
  ([code, e]) => `| ${code} | ${e.status} | ${e.flag} | ${e.message} |`,
);
const sections = Object.keys(CATALOGUE).map(
  (code) => `### ${code}\n\n- cause: ${REMEDIES[code].cause}\n- remedy: ${REMEDIES[code].remedy}\n`,
);
writeFileSync(
  new URL('../docs/errors.md', import.meta.url),
  `# Error catalogue

Every error that crosses a module boundary is a \`ZmeshError\` with one of these stable codes.
A code never changes meaning. The status is what a CONNECT or an HTTP request ends with; the
flag is the bounded \`response_flags\` metric label. Generated from
\`packages/shared/src/errors/catalogue.ts\` and \`remedies.ts\` by \`node scripts/errors-doc.mjs\`;
errors.test.ts keeps them in step.

| code | status | flag | message |
| --- | --- | --- | --- |
${rows.join('\n')}

## Causes and remedies

${sections.join('\n')}`,
);
