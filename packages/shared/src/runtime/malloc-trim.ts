import { createRequire } from 'node:module';
import { logger } from '../log/index.js';

const log = logger('memory');

type Trim = (pad: number) => number;

/** glibc's malloc_trim, bound through koffi on first use (not every process that loads shared needs koffi). */
let bound: Trim | null | undefined;

function bind(): Trim | null {
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    return koffi.load('libc.so.6').func('int malloc_trim(size_t pad)') as Trim;
  } catch (e) {
    // Not glibc (musl has no malloc_trim) or no koffi build for this platform: collections still run.
    log.warn({ err: (e as Error).message }, 'malloc_trim unavailable: freed malloc memory stays resident');
    return null;
  }
}

/** glibc's malloc_trim(0): returns every free page of every arena to the kernel; a no-op where unavailable. */
export function mallocTrim(): void {
  if (bound === undefined) bound = bind();
  bound?.(0);
}
