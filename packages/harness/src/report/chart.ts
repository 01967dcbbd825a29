import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

export interface BarRow {
  /** One chart panel per group (e.g. a workload). */
  group: string;
  /** One bar per series (e.g. a path). */
  series: string;
  value: number;
}

/**
 * Grouped bar chart as PNG: vega-lite → vega (SVG, no canvas needed) → resvg (PNG).
 * Each group gets its own panel with an independent scale, since workloads have
 * different units.
 */
export async function barChartPng(
  rows: BarRow[],
  opts: {
    title: string;
    unit?: string;
    /** A symmetric-log value axis, for values spanning orders of magnitude. */
    log?: boolean;
  },
): Promise<Buffer> {
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: opts.title,
    data: { values: rows },
    facet: {
      row: {
        field: 'group',
        type: 'nominal',
        // Panels in the order the rows come (the run's order), not alphabetical.
        sort: null,
        title: null,
        header: { labelAngle: 0, labelAlign: 'left', labelAnchor: 'start', labelOrient: 'top' },
      },
    },
    resolve: { scale: { x: 'independent' } },
    spec: {
      width: 520,
      height: { step: 18 },
      mark: { type: 'bar', tooltip: true },
      encoding: {
        // Series names in full (vega-lite cuts them at 180 px): the bench's paths are long.
        y: { field: 'series', type: 'nominal', title: null, sort: null, axis: { labelLimit: 600 } },
        x: {
          field: 'value',
          type: 'quantitative',
          title: opts.unit ?? 'value',
          ...(opts.log ? { scale: { type: 'symlog' as const } } : {}),
        },
        color: { field: 'series', type: 'nominal', legend: null },
      },
    },
    config: { background: 'white', font: 'DejaVu Sans' },
  };
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  return new Resvg(svg, { font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' } })
    .render()
    .asPng();
}
