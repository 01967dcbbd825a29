export type { Attempt, AttemptReport, BypassReport, Expected, Observed, Outcome } from './attempt.js';
export { BYPASS_SPEC, BypassLab } from './bypass-lab.js';
export { PRIVILEGE_PROBE } from './bypass-programs.js';
export { ATTEMPT_TIMEOUT_MS, runAttempts } from './bypass-runner.js';
export { formatTable } from './bypass-table.js';
export { catalogue } from './catalogue.js';
export { type Received, type RecordingApp, rawExchange, startRecordingApp, statusesOf } from './raw-http.js';
