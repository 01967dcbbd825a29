/**
 * The statistics the benches, harnesses and their child programs share: the one quantile,
 * the medians, rounding.
 */

/**
 * The q-quantile of ascending `sorted` (nearest rank below); NaN when empty (null in JSON).
 * Self-contained: the programs the harness runs in child processes and pods embed its
 * source (`const quantile = ${quantile};`).
 */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** The median of ascending `sorted`: the mean of the two middles when even; NaN when empty. */
export function median(sorted: readonly number[]): number {
  const mid = sorted.length / 2;
  return sorted.length % 2 ? sorted[Math.floor(mid)]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The median item by `key` (the upper of two middles: the 0.5-quantile); `items` is not empty. */
export function upperMedianBy<T>(items: readonly T[], key: (item: T) => number): T {
  return [...items].sort((a, b) => key(a) - key(b))[Math.floor(items.length / 2)]!;
}

/** The lower of the two middle items (the middle one when odd), by `key`. */
export function lowerMedianBy<T>(items: readonly T[], key: (item: T) => number): T {
  return [...items].sort((a, b) => key(a) - key(b))[Math.floor((items.length - 1) / 2)]!;
}

/** Milliseconds to two decimals, as the benches print them. */
export function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/** Heap and array-buffer bytes after two full collections; null without `node --expose-gc`. */
export function heapAfterGc(): number | null {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) return null;
  gc();
  gc();
  return process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers;
}

/** Least-squares slope of y over x. */
export function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}
