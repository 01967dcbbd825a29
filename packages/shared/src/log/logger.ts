import { writeSync } from 'node:fs';
import { type Logger as PinoLogger, pino } from 'pino';

export type Logger = PinoLogger;
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

const LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

/** Keys every line carries; a call's own field of the same name is renamed `<key>_field`. */
const RESERVED = new Set(['level', 'time', 'pid', 'scope', 'msg']);

/**
 * Every line: ISO-8601 time, the level as a word, one key per field (a call's own `level` or
 * `scope` never doubles the line's: `jq` keeps only the last of two equal keys).
 */
const LINE_OPTIONS = {
  base: { pid: process.pid },
  timestamp: pino.stdTimeFunctions.isoTime,
  formatters: {
    level: (label: string) => ({ level: label }),
    log: (fields: Record<string, unknown>) => {
      let out = fields;
      for (const key of Object.keys(fields))
        if (RESERVED.has(key)) {
          if (out === fields) out = { ...fields };
          out[`${key}_field`] = out[key];
          delete out[key];
        }
      return out;
    },
  },
};

/**
 * One root logger per process, structured JSON on stderr (stdout stays free for CLI
 * output), or a compact human line with ZMESH_LOG_FORMAT=pretty or when stderr is a
 * terminal (ZMESH_LOG_FORMAT=json forces JSON). ZMESH_LOG sets the default level;
 * ZMESH_LOG_<SCOPE>=debug or the admin `/logging?scope=&level=` endpoint changes one scope
 * at run time, and a scope set on its own keeps its level when the default changes.
 */
const root: PinoLogger = pino(
  { level: envLevel(process.env.ZMESH_LOG) ?? 'info', ...LINE_OPTIONS },
  prettyWanted() ? prettySink() : pino.destination({ dest: 2, sync: true }),
);

const scopes = new Map<string, PinoLogger>();
/** Scopes whose level was set for them alone (env or admin): a new default leaves them. */
const explicit = new Set<string>();

export function logger(scope: string): Logger {
  let log = scopes.get(scope);
  if (log === undefined) {
    log = root.child({ scope });
    const override = envLevel(process.env[`ZMESH_LOG_${scope.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`]);
    if (override !== undefined) {
      log.level = override;
      explicit.add(scope);
    }
    scopes.set(scope, log);
  }
  return log;
}

function prettyWanted(): boolean {
  const format = process.env.ZMESH_LOG_FORMAT;
  if (format === 'pretty') return true;
  if (format === 'json') return false;
  return process.stderr.isTTY === true;
}

/** `12:34:56.789 WARN  scope  message  key=value …`, one line per record, written at once. */
function prettySink(): { write(line: string): void } {
  return {
    write(line: string) {
      let text = line;
      try {
        const { time, level, scope, msg, pid: _pid, ...fields } = JSON.parse(line) as Record<string, unknown>;
        const clock = typeof time === 'string' ? time.slice(11, 23) : '';
        const rest = Object.entries(fields)
          .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
          .join(' ');
        text = `${clock} ${String(level).toUpperCase().padEnd(5)} ${String(scope ?? '-')}  ${String(msg ?? '')}${rest ? `  ${rest}` : ''}\n`;
      } catch {
        // Not JSON: written as it came.
      }
      try {
        writeSync(2, text);
      } catch {
        // stderr gone: the line is dropped.
      }
    },
  };
}

/**
 * A logger for per-request lines (the waypoint's access log): the same JSON on stderr, but
 * lines are gathered and written together, up to 4 KiB or 1 s old, in one blocking write.
 * One write per line cost the waypoint 7% of its CPU at 1,000 requests/s. Whole lines go
 * out in each write, so they never interleave with the other loggers' lines; what is still
 * gathered is written at exit. Levels follow `scope` like any other logger's.
 */
export function accessLogger(scope: string): Logger {
  let log = accessScopes.get(scope);
  if (log === undefined) {
    log = accessRoot().child({ scope });
    log.level = logger(scope).level;
    accessScopes.set(scope, log);
  }
  return log;
}

const accessScopes = new Map<string, PinoLogger>();
let accessBase: PinoLogger | undefined;

function accessRoot(): PinoLogger {
  if (accessBase) return accessBase;
  const lines: string[] = [];
  let bytes = 0;
  const flush = () => {
    if (lines.length === 0) return;
    const out = lines.join('');
    lines.length = 0;
    bytes = 0;
    try {
      writeSync(2, out);
    } catch {
      // stderr gone (its reader exited): the lines are dropped, as a blocking logger's would be.
    }
  };
  setInterval(flush, 1000).unref();
  process.on('exit', flush);
  const sink = {
    write(line: string) {
      lines.push(line);
      bytes += line.length;
      if (bytes >= 4096) flush();
    },
  };
  accessBase = pino({ level: 'trace', ...LINE_OPTIONS }, sink);
  return accessBase;
}

/**
 * Sets the level of one scope, or the default with `scope = '*'`: every scope that was not
 * set on its own follows the default. An unknown level or scope changes nothing and says why.
 */
export function setLogLevel(scope: string, level: string): { ok: true } | { ok: false; error: string } {
  const parsed = envLevel(level);
  if (parsed === undefined)
    return { ok: false, error: `unknown level ${JSON.stringify(level)}; levels: ${LEVELS.join(', ')}` };
  if (scope === '*') {
    root.level = parsed;
    for (const [name, log] of scopes) if (!explicit.has(name)) log.level = parsed;
    for (const [name, log] of accessScopes) if (!explicit.has(name)) log.level = parsed;
    return { ok: true };
  }
  const log = scopes.get(scope);
  if (!log)
    return {
      ok: false,
      error: `unknown scope ${JSON.stringify(scope)}; scopes: ${['*', ...scopes.keys()].sort().join(', ')}`,
    };
  log.level = parsed;
  explicit.add(scope);
  const access = accessScopes.get(scope);
  if (access) access.level = parsed;
  return { ok: true };
}

export function logLevels(): Record<string, string> {
  const out: Record<string, string> = { '*': root.level };
  for (const [scope, log] of scopes) out[scope] = log.level;
  return out;
}

function envLevel(value: string | undefined): LogLevel | undefined {
  return LEVELS.find((l) => l === value?.toLowerCase());
}
