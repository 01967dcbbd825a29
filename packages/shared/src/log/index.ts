export { accessLogger, type Logger, type LogLevel, logger, logLevels, setLogLevel } from './logger.js';
