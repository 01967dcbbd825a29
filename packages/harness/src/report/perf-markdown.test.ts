import test from 'ava';
import type { BenchReport } from '../bench/bench-results.js';
import { checkTargets } from '../bench/bench-targets.js';
import { markdownTable, PERF_END, PERF_START, rewritePerfSection } from './perf-markdown.js';

const report: BenchReport = {
  paths: [
    { name: 'direct', kind: 'direct' },
    { name: 'stunnel4 pair', kind: 'c-mtls' },
    { name: 'zmesh ztunnel pair', kind: 'zmesh' },
  ],
  results: [
    { path: 'direct', workload: 'iperf3 1 stream', metric: 'throughput', value: 2000, unit: 'MB/s' },
    { path: 'stunnel4 pair', workload: 'iperf3 1 stream', metric: 'throughput', value: 400, unit: 'MB/s' },
    {
      path: 'zmesh ztunnel pair',
      workload: 'iperf3 1 stream',
      metric: 'throughput',
      value: 500,
      unit: 'MB/s',
    },
  ],
  run: { date: '2026-11-30T04:00:00Z', quick: true, cpus: 2, node: 'v20', kernel: '6.18', pinning: 'p' },
};

test('the perf section is appended with its markers when the file has none', (t) => {
  const out = rewritePerfSection('# Title\n\ntext\n', report, 'zmesh ztunnel pair');
  t.true(out.startsWith('# Title\n\ntext\n\n<!-- perf:start -->'));
  t.true(out.trimEnd().endsWith(PERF_END));
  t.regex(
    out,
    /\| iperf3 1 stream +\| throughput \(MB\/s\) +\| 2000 +\| 400 +\| 500 +\| 0\.25× +\| 1\.25× +\|/,
  );
  t.regex(out, /throughput ≥ 1\.0× best C mTLS pair +\| 1\.25× \(500 vs 400\) +\| yes/);
});

test('tables are padded to their column widths, as Biome formats markdown', (t) => {
  t.deepEqual(markdownTable(['a', 'long header'], [['wide cell', 'x']]), [
    '| a         | long header |',
    '| --------- | ----------- |',
    '| wide cell | x           |',
  ]);
});

test('only the text between the markers is replaced, and a second rewrite changes nothing', (t) => {
  const before = `# A\n${PERF_START}\nold numbers\n${PERF_END}\n## After\n`;
  const once = rewritePerfSection(before, report, 'zmesh ztunnel pair');
  t.false(once.includes('old numbers'));
  t.true(once.startsWith(`# A\n${PERF_START}\n## The latest full run`));
  t.true(once.endsWith(`${PERF_END}\n## After\n`));
  t.is(rewritePerfSection(once, report, 'zmesh ztunnel pair'), once);
});

test("a before path's waypoint target reads the before build's waypoint, not this one's", (t) => {
  const http = 'HTTP 1 KiB @ 1,000 rps';
  const metric = 'waypoint CPU per 1,000 rps';
  const r: BenchReport = {
    ...report,
    paths: [
      ...report.paths,
      { name: 'zmesh ztunnel pair (before)', kind: 'zmesh' },
      { name: 'zmesh ztunnel → waypoint → ztunnel', kind: 'zmesh' },
      { name: 'zmesh ztunnel → waypoint → ztunnel (before)', kind: 'zmesh' },
    ],
    results: [
      { path: 'zmesh ztunnel → waypoint → ztunnel', workload: http, metric, value: 0.4, unit: 'vCPU' },
      {
        path: 'zmesh ztunnel → waypoint → ztunnel (before)',
        workload: http,
        metric,
        value: 0.5,
        unit: 'vCPU',
      },
    ],
  };
  const row = (path: string) => checkTargets(r, path).find((c) => c.target.startsWith('waypoint'));
  t.is(row('zmesh ztunnel pair')?.measured, '0.400 vCPU');
  t.is(row('zmesh ztunnel pair (before)')?.measured, '0.500 vCPU');
});

test('with a node:tls pipe pair, zmesh is also read against it (not counted as a C peer)', (t) => {
  const r: BenchReport = {
    ...report,
    paths: [...report.paths, { name: 'node:tls pipe pair', kind: 'node-tls' }],
    results: [
      ...report.results,
      {
        path: 'node:tls pipe pair',
        workload: 'iperf3 1 stream',
        metric: 'throughput',
        value: 250,
        unit: 'MB/s',
      },
    ],
  };
  const out = rewritePerfSection('', r, 'zmesh ztunnel pair');
  t.regex(out, /\| zmesh vs best C mTLS \| zmesh vs node:tls pipe \|/);
  t.regex(out, /\| 500 +\| 250 +\| 0\.25× +\| 1\.25× +\| 2\.00× +\|/);
  t.regex(out, /throughput ≥ 1\.0× best C mTLS pair +\| 1\.25× \(500 vs 400\)/);
});

test('the RSS target names its anonymous and file-backed parts when the run has both', (t) => {
  const rss = (metric: string, value: number) => ({
    path: 'zmesh ztunnel pair',
    workload: 'idle',
    metric,
    value,
    unit: 'MB',
  });
  const row = (r: BenchReport) =>
    checkTargets(r, 'zmesh ztunnel pair').find((c) => c.target.startsWith('RSS'));
  const both = row({
    ...report,
    results: [rss('RSS (largest process)', 70), rss('anonymous RSS (largest process)', 25)],
  });
  t.is(both?.measured, '70.0 MB (anonymous 25.0, file pages 45.0)');
  t.false(both?.met);
  // A JSON from before the anonymous row was measured still reads.
  t.is(row({ ...report, results: [rss('RSS (largest process)', 60)] })?.measured, '60.0 MB');
});
