import { runCli } from '@zmesh/shared/cli';
import { Command } from 'commander';
import { controlPlaneCommand } from './command.js';

/** The control plane's entry: `bin/zmesh control-plane …` runs this module. */
const program = new Command('zmesh');
program.addCommand(controlPlaneCommand());
await runCli(program);
