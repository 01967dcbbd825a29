import { Command } from 'commander';
import { controlPlaneCommand } from './command.js';

/** The control plane's entry: `bin/zmesh control-plane …` runs this module. */
const program = new Command('zmesh').showHelpAfterError();
program.addCommand(controlPlaneCommand());
await program.parseAsync(process.argv);
