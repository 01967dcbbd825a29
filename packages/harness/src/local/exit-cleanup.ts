import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const tasks = new Set<() => void>();
let installed = false;

/**
 * Runs `task` (synchronous, idempotent: a signal may be followed by 'exit') on every exit
 * path but SIGKILL: normal exit, process.exit, an uncaught error (all end in 'exit'), and
 * SIGINT/SIGTERM/SIGHUP, which are re-raised afterwards so the process still dies of them
 * unless another listener keeps it. Returns a function that unregisters it.
 */
export function onExit(task: () => void): () => void {
  install();
  tasks.add(task);
  return () => {
    tasks.delete(task);
  };
}

function runAll(): void {
  for (const task of [...tasks]) {
    try {
      task();
    } catch {
      // One failed cleanup must not keep the others from running.
    }
  }
}

function install(): void {
  if (installed) return;
  installed = true;
  process.on('exit', runAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const onSignal = () => {
      runAll();
      process.removeListener(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

/** A temp directory removed on every exit path (see `onExit`), or earlier by `remove()`. */
export interface TempDir {
  readonly path: string;
  remove(): void;
  /** Leaves it in place at exit (a post-mortem); `remove()` still removes it. */
  keep(): void;
}

export function tempDir(prefix: string, parent = tmpdir()): TempDir {
  const path = mkdtempSync(join(parent, prefix));
  const remove = () => rmSync(path, { recursive: true, force: true });
  const unregister = onExit(remove);
  return {
    path,
    remove: () => {
      unregister();
      remove();
    },
    keep: unregister,
  };
}
