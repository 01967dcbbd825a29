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

/** Sets the level of one scope, or of every scope with `scope = '*'`. */
export function setLogLevel(scope: string, level: string): boolean {
  const parsed = envLevel(level);
  if (parsed === undefined) return false;
  if (scope === '*') {
    root.level = parsed;
    for (const log of scopes.values()) log.level = parsed;
  } else {
    logger(scope).level = parsed;
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
