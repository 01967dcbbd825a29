export { firstFiring } from './alert-eval.js';
export {
  checksTable,
  type DrillCheck,
  DrillRecorder,
  type DrillReport,
  type TimelineEntry,
  timelineTable,
  verdictLine,
} from './drill-report.js';
export { MetricsScraper, parseOutageMetrics } from './metrics-scraper.js';
export { DRILL_SPEC, type OutageDrillOptions, runOutageDrill } from './outage-drill.js';
export { ALERT_RULES_FILE, ALERT_TESTS_FILE, promtoolPath, promtoolTestRules } from './promtool.js';
export { outageChartPng } from './timeline-chart.js';
