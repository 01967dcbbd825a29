import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { DrillReport } from './drill-report.js';

const PANELS = ['client -> server (per 0.5 s)', 'seconds to earliest cert expiry', 'xDS connected'];

/**
 * The drill as PNG: one panel per measure over drill time, with the events (cut, restarts,
 * expiry, alert, recovery) as vertical rules in every panel. vega-lite → SVG → resvg.
 */
export async function outageChartPng(report: DrillReport, title: string): Promise<Buffer> {
  const layer = (panel: string): object => ({
    width: 640,
    height: 130,
    title: panel,
    layer: [
      {
        data: { values: report.series.filter((s) => s.panel === panel) },
        mark: { type: panel.startsWith('client') ? 'bar' : 'line', point: !panel.startsWith('client') },
        encoding: {
          x: { field: 't', type: 'quantitative', title: 'drill time (s)', scale: { domainMin: 0 } },
          y: { field: 'value', type: 'quantitative', title: null },
          color: { field: 'series', type: 'nominal', title: null },
        },
      },
      {
        data: { values: report.marks },
        mark: { type: 'rule', strokeDash: [4, 3], color: '#555' },
        encoding: { x: { field: 't', type: 'quantitative' } },
      },
      {
        data: { values: report.marks },
        mark: { type: 'text', angle: 270, align: 'right', baseline: 'bottom', dy: -2, fontSize: 9, y: 2 },
        encoding: { x: { field: 't', type: 'quantitative' }, text: { field: 'label' } },
      },
    ],
  });
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title,
    vconcat: PANELS.map(layer),
    resolve: { scale: { color: 'independent', x: 'shared' } },
    config: { background: 'white', font: 'DejaVu Sans' },
  } as TopLevelSpec;
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  return new Resvg(svg, { font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' } })
    .render()
    .asPng();
}
