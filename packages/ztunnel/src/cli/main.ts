import { runCli } from '@zmesh/shared/cli';
import { Command } from 'commander';
import { ztunnelCommand } from './command.js';

/**
 * The node proxy's entry: `bin/zmesh ztunnel …` runs this module, or its bundle
 * (dist/bundle/main.js, built by scripts/bundle.mjs), with the V8 flags bin/zmesh sets.
 */
const program = new Command('zmesh');
program.addCommand(ztunnelCommand());
await runCli(program);
