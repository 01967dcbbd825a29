import type { BenchReport } from '../bench/bench-results.js';
import { barChartPng } from './chart.js';

/** One panel per (workload, metric), one bar per path, in the run's path order. */
export function benchChartPng(report: BenchReport): Promise<Buffer> {
  const rows = report.results.map((r) => ({
    group: `${r.workload}: ${r.metric} (${r.unit})`,
    series: r.path,
    value: r.value,
  }));
  return barChartPng(rows, {
    title: `zmesh bench, ${report.run.date.slice(0, 16)} (same run, same machine)`,
    unit: '',
  });
}
