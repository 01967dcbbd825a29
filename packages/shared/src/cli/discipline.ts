import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type Command, CommanderError, InvalidArgumentError } from 'commander';
import { isZmeshError, ZmeshError } from '../errors/index.js';

/**
 * One discipline for every `zmesh` command (the operator CLI and the daemons' entries):
 * - a usage error (unknown option or command, missing or malformed argument, bad enum,
 *   number or URL) is one line naming the option and what it accepts, exit 2;
 * - a runtime failure is one line carrying its ZM_ERR_* code, exit 1;
 * - no stack trace reaches the terminal unless ZMESH_DEBUG=1.
 */

/** Thrown by an action for a usage error its parsers could not see (e.g. two exclusive forms): exit 2. */
export class UsageError extends Error {}

/** Every command under `program`: errors as one line, no help dump after them. */
function discipline(cmd: Command): void {
  // A group (`zmesh x`, `zmesh ns`) given no command or an unknown one: one line naming its
  // commands, not commander's help dump on stderr.
  const group = cmd as Command & { _actionHandler?: unknown };
  if (cmd.commands.length > 0 && !group._actionHandler && cmd.parent !== null)
    cmd.allowExcessArguments().action(function (this: Command) {
      const names = this.commands.map((c) => c.name()).join(', ');
      const [first] = this.args;
      throw new UsageError(
        first === undefined ? `missing command: want ${names}` : `unknown command '${first}': want ${names}`,
      );
    });
  cmd.exitOverride();
  cmd.showHelpAfterError(false);
  cmd.configureOutput({
    outputError: (str, write) => write(`${usageLine(cmd, str)}\n`),
  });
  for (const sub of cmd.commands) discipline(sub);
}

function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** Commander's `error: …\n(Did you mean …?)` as one line, with where to read more. */
function usageLine(cmd: Command, str: string): string {
  const text = str
    .trim()
    .replace(/^error: /, '')
    .replace(/\s*\n\(Did you mean (.*)\?\)/, ' (did you mean $1?)')
    .replaceAll('\n', ' ');
  return `${commandPath(cmd)}: ${text} (see ${commandPath(cmd)} --help)`;
}

/**
 * Parses argv and runs the chosen action under the discipline above; sets process.exitCode.
 * Help and --version exit 0.
 */
export async function runCli(program: Command, argv: readonly string[] = process.argv): Promise<void> {
  discipline(program);
  // `zmesh … | head`: the reader left; that is the end of the output, not a crash.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
    process.exit(process.exitCode ?? 0);
  });
  let running = program.name();
  program.hook('preAction', (_, action) => {
    running = commandPath(action);
  });
  try {
    await program.parseAsync(argv as string[]);
  } catch (e) {
    process.exitCode = cliFailure(running, e);
  }
}

/** The exit code for what an action (or the parser) threw, after printing its one line. */
export function cliFailure(
  command: string,
  e: unknown,
  write = (s: string) => process.stderr.write(s),
): number {
  if (e instanceof CommanderError) {
    // Already printed by outputError (or help/version, which exit 0).
    if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') return 0;
    return 2;
  }
  const debug = process.env.ZMESH_DEBUG === '1';
  if (e instanceof UsageError) {
    write(`${command}: ${e.message} (see ${command} --help)\n`);
    return 2;
  }
  if (isZmeshError(e)) write(`${command}: ${e.code}: ${e.message}\n`);
  else {
    const reason = e instanceof Error ? e.message : String(e);
    write(
      `${command}: ZM_ERR_INTERNAL_FAULT: internal error: ${reason}${debug ? '' : ' (ZMESH_DEBUG=1 shows the stack)'}\n`,
    );
  }
  if (debug && e instanceof Error && e.stack) write(`${e.stack}\n`);
  return 1;
}

/** Option parsers: each refuses a bad value in words that say what it accepts. */
export function intOption(min: number, max: number, unit = ''): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`want an integer ${min}..${max}${unit ? ` (${unit})` : ''}`);
    return n;
  };
}

export function numberOption(min: number, max: number, unit = ''): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < min || n > max)
      throw new InvalidArgumentError(`want a number ${min}..${max}${unit ? ` (${unit})` : ''}`);
    return n;
  };
}

export function portOption(value: string): number {
  return intOption(0, 65535, 'TCP port')(value);
}

/** `--admin`: a Unix socket path, or `http(s)://host:port` (no path). */
export function adminOption(value: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) {
    if (/^[^/]*:\d+$/.test(value))
      throw new InvalidArgumentError('want a socket path or http://host:port (the URL lacks http://)');
    return value;
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('want a socket path or http://host:port');
  }
  if (url.protocol !== 'http:' || url.port === '' || (url.pathname !== '/' && url.pathname !== ''))
    throw new InvalidArgumentError('want a socket path or http://host:port (no path, an explicit port)');
  return `http://${url.host}`;
}

/**
 * `-f FILE`, `-f -` (stdin) or `-f DIR` (its *.yaml and *.yml files, in name order) as one
 * multi-document YAML text, as kubectl reads them. A file that cannot be read is
 * ZM_ERR_CONFIG_INVALID naming it.
 */
export async function readManifests(file: string): Promise<string> {
  const fail = (reason: string) => new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: file, reason });
  if (file === '-') {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  }
  const info = await stat(file).catch((e: NodeJS.ErrnoException) => {
    throw fail(e.code === 'ENOENT' ? 'no such file or directory' : e.message);
  });
  if (!info.isDirectory())
    return readFile(file, 'utf8').catch((e: Error) => {
      throw fail(`cannot read: ${e.message}`);
    });
  const names = (await readdir(file)).filter((n) => /\.ya?ml$/.test(n)).sort();
  if (names.length === 0) throw fail('the directory holds no .yaml or .yml file');
  const texts = await Promise.all(
    names.map((n) =>
      readFile(join(file, n), 'utf8').catch((e: Error) => {
        throw fail(`cannot read ${n}: ${e.message}`);
      }),
    ),
  );
  return texts.map((t) => (t.endsWith('\n') ? t : `${t}\n`)).join('---\n');
}

/**
 * A config file a command was given that cannot be read, is not YAML or holds bad values
 * (every reason, as its loader returned them): a runtime failure, ZM_ERR_CONFIG_INVALID on one
 * line (exit 1), as `zmesh apply -f` treats its file. Usage errors are the flags' alone.
 */
export function configFileRefused(file: string, reasons: readonly string[]): ZmeshError {
  const prefix = `${file}: `;
  const reason = reasons.map((r) => (r.startsWith(prefix) ? r.slice(prefix.length) : r)).join('; ');
  return new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: file, reason });
}

/** `Examples:` after a command's help. */
export function withExamples(cmd: Command, ...examples: string[]): Command {
  if (examples.length === 0) return cmd;
  return cmd.addHelpText('after', `\nExamples:\n${examples.map((e) => `  $ ${e}`).join('\n')}\n`);
}

/** An enum option: the value itself, or a usage error listing the values it accepts. */
export function oneOf(...values: string[]): (value: string) => string {
  return (value) => {
    if (!values.includes(value)) throw new InvalidArgumentError(`want ${values.join(' or ')}`);
    return value;
  };
}

/**
 * A parser that only checks: the option keeps its text (the daemons convert their own
 * flags), but a bad value is refused before anything starts.
 */
export function checked(parse: (value: string) => unknown): (value: string) => string {
  return (value) => {
    parse(value);
    return value;
  };
}

/**
 * A `--ca-dir` of a proxy without a control plane: its root-cert.pem and root-key.pem, or
 * ZM_ERR_CONFIG_INVALID saying how to make them (`zmesh control-plane --ca-dir DIR` creates
 * a CA there when it is absent).
 */
export async function readCaDir(dir: string): Promise<{ certPem: string; keyPem: string }> {
  const read = (name: string) =>
    readFile(join(dir, name), 'utf8').catch((e: NodeJS.ErrnoException) => {
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', {
        source: `--ca-dir ${dir}`,
        reason: `${name}: ${e.code === 'ENOENT' ? 'missing' : e.message}; a CA directory holds root-cert.pem and root-key.pem (zmesh control-plane --ca-dir ${dir} creates them)`,
      });
    });
  // One after the other: with both missing, the message names root-cert.pem every time
  // (read together, whichever failed first was named, and test/cli-discipline flaked).
  const certPem = await read('root-cert.pem');
  const keyPem = await read('root-key.pem');
  return { certPem, keyPem };
}
