import { runCli } from '@zmesh/shared/cli';
import { Command } from 'commander';
import { nodeAgentCommand } from './command.js';

/** The node agent's entry: `bin/zmesh node-agent …` runs this module. */
const program = new Command('zmesh');
program.addCommand(nodeAgentCommand());
await runCli(program);
