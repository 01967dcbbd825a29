export {
  AccessLog,
  type AccessLogInputs,
  type AccessLogMode,
  type AccessLogPolicy,
  accessLogFields,
  type ConnectionRecord,
  DEFAULT_ACCESS_LOG_BURST,
  DEFAULT_ACCESS_LOG_POLICY,
  DEFAULT_ACCESS_LOG_RATE,
  parseAccessLogMode,
  parseNamespaceModes,
} from './access-log.js';
export { accessLogger, type Logger, type LogLevel, logger, logLevels, setLogLevel } from './logger.js';
