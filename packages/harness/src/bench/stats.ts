/** Small statistics the benches share. */

/** The q-quantile of ascending `sorted` (nearest rank below); NaN when empty. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
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
