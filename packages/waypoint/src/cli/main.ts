import { runCli } from '@zmesh/shared/cli';
import { Command } from 'commander';
import { waypointCommand } from './command.js';

/**
 * The waypoint's entry: `bin/zmesh waypoint …` runs this module, or its bundle
 * (dist/bundle/main.js, built by scripts/bundle.mjs), with the V8 flags bin/zmesh sets.
 */
const program = new Command('zmesh');
program.addCommand(waypointCommand());
await runCli(program);
