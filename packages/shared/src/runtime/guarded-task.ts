import { Counter, type Registry } from 'prom-client';
import { ZmeshError } from '../errors/index.js';
import { logger } from '../log/index.js';

const log = logger('runtime');
const METRIC = 'zmesh_task_failures_total';

/**
 * One counter for the process, registered into each registry that asks (a test process
 * runs several proxies): a timer has no registry of its own to count into.
 */
const failures = new Counter({
  name: METRIC,
  help: 'Periodic tasks (timers, probes, collectors) that threw; caught, logged and counted instead of ending the process',
  labelNames: ['task'],
  registers: [],
});

/** Makes zmesh_task_failures_total{task} visible in `registry` (idempotent). */
export function registerTaskFailures(registry: Registry): void {
  if (registry.getSingleMetric(METRIC) === undefined) registry.registerMetric(failures);
}

/** The failures counted so far for `task` (tests). */
export async function taskFailures(task: string): Promise<number> {
  const values = (await failures.get()).values;
  return values.find((v) => v.labels.task === task)?.value ?? 0;
}

function report(task: string, e: unknown): void {
  failures.inc({ task });
  const error = new ZmeshError('ZM_ERR_TASK_FAILED', { task, reason: (e as Error)?.message ?? String(e) });
  log.error(
    { task, code: error.code, err: error.message, stack: (e as Error)?.stack },
    'periodic task failed',
  );
}

/**
 * `fn` as a timer callback that can never throw out of the event loop: a synchronous throw
 * or a rejected promise is logged (ZM_ERR_TASK_FAILED) and counted in
 * zmesh_task_failures_total{task}, and the process goes on (issue 38: EMFILE from
 * process.memoryUsage() in a timer once ended the whole proxy).
 */
export function guarded(task: string, fn: () => unknown): () => void {
  return () => {
    try {
      const result = fn();
      if (result instanceof Promise) result.catch((e: unknown) => report(task, e));
    } catch (e) {
      report(task, e);
    }
  };
}

export function guardedInterval(task: string, fn: () => unknown, ms: number): NodeJS.Timeout {
  return setInterval(guarded(task, fn), ms);
}

export function guardedTimeout(task: string, fn: () => unknown, ms: number): NodeJS.Timeout {
  return setTimeout(guarded(task, fn), ms);
}
