import { writeSync } from 'node:fs';
import { type Logger as PinoLogger, pino } from 'pino';

export type Logger = PinoLogger;
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

const LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

/**
 * One root logger per process, structured JSON on stderr (stdout stays free for CLI
 * output). ZMESH_LOG sets the default level; ZMESH_LOG_<SCOPE>=debug or the admin
 * `/logging?scope=level` endpoint changes one scope at run time.
 */
const root: PinoLogger = pino(
  { level: envLevel(process.env.ZMESH_LOG) ?? 'info', base: { pid: process.pid } },
  pino.destination({ dest: 2, sync: true }),
);

const scopes = new Map<string, PinoLogger>();

export function logger(scope: string): Logger {
  let log = scopes.get(scope);
  if (log === undefined) {
    log = root.child({ scope });
    const override = envLevel(process.env[`ZMESH_LOG_${scope.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`]);
    if (override !== undefined) log.level = override;
    scopes.set(scope, log);
  }
  return log;
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
  accessBase = pino({ level: 'trace', base: { pid: process.pid } }, sink);
  return accessBase;
}

/** Sets the level of one scope, or of every scope with `scope = '*'`. */
export function setLogLevel(scope: string, level: string): boolean {
  const parsed = envLevel(level);
  if (parsed === undefined) return false;
  if (scope === '*') {
    root.level = parsed;
    for (const log of scopes.values()) log.level = parsed;
    for (const log of accessScopes.values()) log.level = parsed;
  } else {
    logger(scope).level = parsed;
    const access = accessScopes.get(scope);
    if (access) access.level = parsed;
  }
  return true;
}

export function logLevels(): Record<string, string> {
  const out: Record<string, string> = { '*': root.level };
  for (const [scope, log] of scopes) out[scope] = log.level;
  return out;
}

function envLevel(value: string | undefined): LogLevel | undefined {
  return LEVELS.find((l) => l === value?.toLowerCase());
}
