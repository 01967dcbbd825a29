/**
 * At most `limit` tasks at once, across every caller that shares the returned function (CLI
 * tests start many short zmesh processes; a loaded 2-core machine runs four at a time well).
 */
export function limiter(limit: number): <T>(task: () => Promise<T>) => Promise<T> {
  let running = 0;
  const waiting: Array<() => void> = [];
  return async (task) => {
    if (running >= limit) await new Promise<void>((r) => waiting.push(r));
    running++;
    try {
      return await task();
    } finally {
      running--;
      waiting.shift()?.();
    }
  };
}

/** `run` over `items`, at most `limit` at once, results in order. */
export function pool<T, R>(items: readonly T[], limit: number, run: (item: T) => Promise<R>): Promise<R[]> {
  const slot = limiter(limit);
  return Promise.all(items.map((item) => slot(() => run(item))));
}
